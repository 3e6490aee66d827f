//! Rust names from wire names: `session/set_mode` → `session_set_mode`,
//! `tool_call_update` → `ToolCallUpdate`, `sessionId` → `session_id`.

/// Splits on non-alphanumerics and on lower→upper case changes.
fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev: Option<char> = None;
    for c in s.chars() {
        if !c.is_ascii_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev = None;
            continue;
        }
        let boundary = match prev {
            Some(p) => (p.is_ascii_lowercase() || p.is_ascii_digit()) && c.is_ascii_uppercase(),
            None => false,
        };
        if boundary && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(c);
        prev = Some(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// `agent_message_chunk` → `AgentMessageChunk`; `date-time` → `DateTime`.
pub fn pascal(s: &str) -> String {
    let mut name: String = words(s)
        .iter()
        .map(|w| {
            let mut cs = w.chars();
            match cs.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + &cs.as_str().to_ascii_lowercase(),
                None => String::new(),
            }
        })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) || name.is_empty() {
        name.insert(0, 'V');
    }
    name
}

/// The words of a PascalCase name, as written: `ElicitationSessionScope` → [Elicitation, Session, Scope].
pub fn pascal_words(s: &str) -> Vec<String> {
    words(s)
}

/// `sessionId` → `session_id`; `document/didOpen` → `document_did_open`.
pub fn snake(s: &str) -> String {
    let name = words(s).iter().map(|w| w.to_ascii_lowercase()).collect::<Vec<_>>().join("_");
    if name.starts_with(|c: char| c.is_ascii_digit()) { format!("_{name}") } else { name }
}

/// `session/prompt` → `SESSION_PROMPT`.
pub fn screaming_snake(s: &str) -> String {
    snake(s).to_ascii_uppercase()
}

/// `METHOD_NOT_FOUND` → `Method not found`: a named constant as the sentence it stands for.
pub fn sentence(screaming: &str) -> String {
    let lower = screaming.replace('_', " ").to_ascii_lowercase();
    let mut cs = lower.chars();
    match cs.next() {
        Some(f) => f.to_ascii_uppercase().to_string() + cs.as_str(),
        None => lower,
    }
}

/// A field or function name, escaped when it is a Rust keyword (`type` → `r#type`).
pub fn field_ident(wire: &str) -> proc_macro2::Ident {
    let name = if wire == "_meta" { "meta".to_owned() } else { snake(wire) };
    ident(&name)
}

/// Methods a generated struct has besides its setters: its constructor, and those of the
/// traits it derives or gets for free that are called as `Type::name(..)` or `value.name(..)`.
/// An inherent setter by one of these names would shadow it (`NumberPropertySchema::default()`
/// would call the setter of the `default` property).
const TAKEN_METHODS: &[&str] = &[
    "new",
    "default",
    "clone",
    "clone_from",
    "clone_into",
    "eq",
    "ne",
    "fmt",
    "serialize",
    "deserialize",
    "into",
    "try_into",
    "from",
    "try_from",
    "to_owned",
    "borrow",
    "borrow_mut",
    "type_id",
    "schema_name",
    "schema_id",
    "json_schema",
    "inline_schema",
];

/// The setter of an optional property: the field's name (`title` → `title`), or with `_value`
/// appended where that name is taken by another method (`default` → `default_value`).
pub fn setter_ident(wire: &str) -> proc_macro2::Ident {
    let field = field_ident(wire).to_string();
    let field = field.trim_start_matches("r#");
    if TAKEN_METHODS.contains(&field) { ident(&format!("{field}_value")) } else { ident(field) }
}

/// `name` as an identifier: a keyword is written raw (`r#type`), and `self`, `Self`, `super`
/// and `crate`, which cannot be, get a trailing `_`.
pub(crate) fn ident(name: &str) -> proc_macro2::Ident {
    const KEYWORDS: &[&str] = &[
        "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "false", "fn",
        "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
        "static", "struct", "trait", "true", "type", "unsafe", "use", "where", "while", "abstract", "become", "box",
        "do", "final", "macro", "override", "priv", "try", "typeof", "unsized", "virtual", "yield",
    ];
    if matches!(name, "self" | "Self" | "super" | "crate") {
        proc_macro2::Ident::new(&format!("{name}_"), proc_macro2::Span::call_site())
    } else if KEYWORDS.contains(&name) {
        proc_macro2::Ident::new_raw(name, proc_macro2::Span::call_site())
    } else {
        proc_macro2::Ident::new(name, proc_macro2::Span::call_site())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(pascal("agent_message_chunk"), "AgentMessageChunk");
        assert_eq!(pascal("date-time"), "DateTime");
        assert_eq!(pascal("Parse error"), "ParseError");
        assert_eq!(snake("sessionId"), "session_id");
        assert_eq!(snake("document/didOpen"), "document_did_open");
        assert_eq!(snake("$/cancel_request"), "cancel_request");
        assert_eq!(screaming_snake("session/set_mode"), "SESSION_SET_MODE");
        assert_eq!(sentence("METHOD_NOT_FOUND"), "Method not found");
        assert_eq!(field_ident("type").to_string(), "r#type");
        assert_eq!(field_ident("_meta").to_string(), "meta");
        assert_eq!(setter_ident("title").to_string(), "title");
        assert_eq!(setter_ident("type").to_string(), "r#type");
        assert_eq!(setter_ident("default").to_string(), "default_value");
        assert_eq!(setter_ident("new").to_string(), "new_value");
        assert_eq!(pascal_words("ElicitationSessionScope"), ["Elicitation", "Session", "Scope"]);
    }
}
