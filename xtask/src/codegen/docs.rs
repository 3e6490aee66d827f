//! Doc comments kept out of the token stream while a piece is rendered, and written into the
//! formatted text afterwards.
//!
//! Descriptions are a fifth of the emitted tokens, and each `#[doc = "..."]` costs an escape
//! (quote), an unescape (syn) and a print (prettyplease) for text that comes out unchanged:
//! prettyplease prints a one-line doc attribute as `///` and the text, trailing spaces
//! trimmed, alone on its line at the current indentation, whatever its length. So while
//! [`deferred`] runs, [`emit::doc`](super::emit::doc) emits one short placeholder attribute per
//! description, and [`expand`] replaces each placeholder line with the lines prettyplease would
//! have printed.

use std::cell::RefCell;

use super::{CodegenError, Result};

thread_local! {
    /// The descriptions taken out of the current piece, in placeholder order.
    static SINK: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// Starts a placeholder doc line (`///\u{1}N`): a control character no description holds at
/// its start, since every emitted doc line begins with a space.
const MARK: char = '\u{1}';

/// Runs `make` with descriptions deferred; returns its result and the descriptions.
pub fn deferred<T>(make: impl FnOnce() -> T) -> (T, Vec<String>) {
    let outer = SINK.with_borrow_mut(|sink| sink.replace(Vec::new()));
    let made = make();
    let docs = SINK.with_borrow_mut(|sink| std::mem::replace(sink, outer)).unwrap_or_default();
    (made, docs)
}

/// The placeholder text for `text` when descriptions are deferred on this thread.
pub fn placeholder(text: &str) -> Option<String> {
    SINK.with_borrow_mut(|sink| {
        let docs = sink.as_mut()?;
        docs.push(text.to_owned());
        Some(format!("{MARK}{}", docs.len() - 1))
    })
}

/// Replaces every placeholder line of `formatted` with its description, one `///` line per
/// line of text, at the placeholder's indentation. Fails if a placeholder was printed any
/// other way (not alone on its line, or as an attribute), rather than lose its description.
pub fn expand(formatted: &str, docs: &[String]) -> Result<String> {
    let misplaced = || CodegenError::table("a deferred doc comment was not printed as a `///` line of its own");
    let pattern = format!("///{MARK}");
    let extra: usize = docs.iter().map(|d| d.len() + 8 * d.lines().count()).sum();
    let mut out = String::with_capacity(formatted.len() + extra);
    let mut expanded = vec![false; docs.len()];
    let mut rest = formatted;
    while let Some(at) = rest.find(&pattern) {
        let line_start = rest[..at].rfind('\n').map_or(0, |i| i + 1);
        let indent = &rest[line_start..at];
        let after = &rest[at + pattern.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let index = after[..digits].parse::<usize>().ok().filter(|&i| i < docs.len());
        let (Some(index), true, Some(tail)) =
            (index, indent.bytes().all(|b| b == b' '), after[digits..].strip_prefix('\n'))
        else {
            return Err(misplaced());
        };
        expanded[index] = true;
        let text = &docs[index];
        out.push_str(&rest[..line_start]);
        for line in text.lines() {
            out.push_str(indent);
            out.push_str("///");
            let line = line.trim_end_matches(' ');
            if !line.is_empty() {
                out.push(' ');
                out.push_str(line);
            }
            out.push('\n');
        }
        rest = tail;
    }
    if expanded.contains(&false) {
        return Err(misplaced());
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use quote::quote;

    /// The deferred path prints what prettyplease prints for the doc attributes themselves.
    #[test]
    fn expanding_matches_prettyplease() {
        let texts = ["Top line  \n\n  indented\n   \nlast", "A field."];
        let item = || {
            let [outer, inner] = texts.map(|t| super::super::emit::doc(Some(t)));
            quote! {
                #outer
                pub struct S {
                    #inner
                    pub f: u8,
                }
            }
        };
        let direct = prettyplease::unparse(&syn::parse2(item()).unwrap());
        let (tokens, docs) = super::deferred(item);
        assert_eq!(docs, texts);
        let formatted = prettyplease::unparse(&syn::parse2(tokens).unwrap());
        assert!(formatted.contains("///\u{1}0\n") && formatted.contains("    ///\u{1}1\n"), "{formatted}");
        assert_eq!(super::expand(&formatted, &docs).unwrap(), direct);
        assert!(super::placeholder("not deferred").is_none());

        // A placeholder that prettyplease does not print alone on its line (here, a doc on an
        // expression) is an error, not a lost description.
        let (tokens, docs) = super::deferred(|| {
            let doc = super::super::emit::doc(Some("On an expression."));
            quote!(const C: u8 = #doc 1;)
        });
        let formatted = prettyplease::unparse(&syn::parse2(tokens).unwrap());
        assert!(super::expand(&formatted, &docs).is_err(), "{formatted}");
    }
}
