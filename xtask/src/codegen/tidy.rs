//! Layout of the `deserialize_struct!` invocations, which prettyplease prints as a raw token
//! run: one field per line, as a person would write them.

use std::str::FromStr;

use proc_macro2::{Delimiter, TokenStream, TokenTree};

const CALL: &str = "serde_support::deserialize_struct!(";

/// Rewrites every `serde_support::deserialize_struct!(...)` in `text`; other text is unchanged.
pub fn struct_macros(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(CALL) {
        out.push_str(&rest[..start]);
        let body_start = start + CALL.len();
        let Some(len) = matching_paren(&rest[body_start..]) else { break };
        let body = &rest[body_start..body_start + len];
        match format_call(body) {
            Some(pretty) => out.push_str(&pretty),
            None => out.push_str(&rest[start..body_start + len + 1]),
        }
        rest = &rest[body_start + len + 1..];
    }
    out.push_str(rest);
    out
}

/// The length of the text up to the `)` closing an already opened `(`.
fn matching_paren(s: &str) -> Option<usize> {
    let mut depth = 1usize;
    let mut in_str = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn format_call(body: &str) -> Option<String> {
    let tokens: Vec<TokenTree> = TokenStream::from_str(body).ok()?.into_iter().collect();
    let [TokenTree::Ident(name), TokenTree::Group(fields)] = &tokens[..] else { return None };
    if fields.delimiter() != Delimiter::Brace {
        return None;
    }
    let mut entries: Vec<Vec<TokenTree>> = vec![Vec::new()];
    for tt in fields.stream() {
        match &tt {
            TokenTree::Punct(p) if p.as_char() == ',' => entries.push(Vec::new()),
            _ => entries.last_mut()?.push(tt),
        }
    }
    let mut out = format!("{CALL}{name} {{\n");
    for entry in entries.iter().filter(|e| !e.is_empty()) {
        out.push_str("    ");
        out.push_str(&compact(entry));
        out.push_str(",\n");
    }
    out.push_str("})");
    Some(out)
}

/// Prints tokens the way rustfmt would for these small shapes: `#[cfg(any(feature = "a"))]
/// name: "wire" => optional(Marker)`.
fn compact(tokens: &[TokenTree]) -> String {
    let mut out = String::new();
    let mut iter = tokens.iter().peekable();
    while let Some(tt) = iter.next() {
        match tt {
            TokenTree::Punct(p) if p.as_char() == '#' => {
                out.push('#');
                if let Some(TokenTree::Group(g)) = iter.next() {
                    out.push('[');
                    out.push_str(&compact(&g.stream().into_iter().collect::<Vec<_>>()));
                    out.push_str("] ");
                }
            }
            TokenTree::Group(g) => {
                let (open, close) = match g.delimiter() {
                    Delimiter::Parenthesis => ('(', ')'),
                    Delimiter::Bracket => ('[', ']'),
                    Delimiter::Brace => ('{', '}'),
                    Delimiter::None => (' ', ' '),
                };
                out.push(open);
                out.push_str(&compact(&g.stream().into_iter().collect::<Vec<_>>()));
                out.push(close);
            }
            TokenTree::Punct(p) => match p.as_char() {
                ':' => out.push_str(": "),
                ',' => out.push_str(", "),
                '=' if matches!(iter.peek(), Some(TokenTree::Punct(n)) if n.as_char() == '>') => {
                    iter.next();
                    out.push_str(" => ");
                }
                '=' => out.push_str(" = "),
                c => out.push(c),
            },
            TokenTree::Ident(i) => out.push_str(&i.to_string()),
            TokenTree::Literal(l) => out.push_str(&l.to_string()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_field_per_line() {
        let text = "x\nserde_support::deserialize_struct!(\n    A { a : \"a\" => required, # [cfg (any (feature = \"f\" , feature = \"g\"))] b : \"_b\" =>\n    optional(DefaultOnError) }\n);\ny";
        assert_eq!(
            super::struct_macros(text),
            "x\nserde_support::deserialize_struct!(A {\n    a: \"a\" => required,\n    #[cfg(any(feature = \"f\", feature = \"g\"))] b: \"_b\" => optional(DefaultOnError),\n});\ny"
        );
    }
}
