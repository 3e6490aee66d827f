//! The method table of `#[acp_agent]` / `#[acp_client]` (`macros/src/table.rs`), generated with
//! the bindings so the macros know exactly the handlers the traits have: names, params and
//! result types, baseline or optional, features, and which capability each handler earns.
//!
//! Capabilities are read off the schema's own words: a capability field whose description
//! starts "Whether the agent (client) supports `METHOD`" (or "the METHOD method", or
//! "all `PREFIX/*` methods") is advertised when the handlers for those methods are present.

use proc_macro2::TokenStream;
use quote::quote;
use serde_json::{Map, Value};

use super::ir::{Gate, Model, Side};

/// One capability field, as a JSON path inside the initialize params or result.
#[derive(Debug, Clone, PartialEq)]
pub struct Capability {
    pub path: Vec<String>,
    /// `true` for a boolean field, `{}` for an object one.
    pub object: bool,
    pub methods: Vec<String>,
}

/// The capability fields of the `root` definition (e.g. `InitializeResponse`), recursively.
pub fn capabilities(defs: &Map<String, Value>, root: &str, model: &Model, side: Side) -> Vec<Capability> {
    let mut out = Vec::new();
    walk(defs, root, &mut Vec::new(), model, side, &mut out, 0);
    out
}

fn walk(
    defs: &Map<String, Value>,
    def: &str,
    path: &mut Vec<String>,
    model: &Model,
    side: Side,
    out: &mut Vec<Capability>,
    depth: usize,
) {
    let Some(props) = defs.get(def).and_then(|d| d.get("properties")).and_then(Value::as_object) else { return };
    if depth > 4 {
        return;
    }
    for (name, prop) in props {
        path.push(name.clone());
        let target = referenced(prop);
        let desc = prop.get("description").and_then(Value::as_str).unwrap_or_default();
        let methods = methods_named(desc, model, side);
        if !methods.is_empty() {
            let object = target.is_some();
            out.push(Capability { path: path.clone(), object, methods });
        } else if let Some(t) = target.filter(|t| t.ends_with("Capabilities")) {
            walk(defs, t, path, model, side, out, depth + 1);
        }
        path.pop();
    }
}

fn referenced(prop: &Value) -> Option<&str> {
    let direct = prop.get("$ref").and_then(Value::as_str);
    let all_of = prop.get("allOf").and_then(|a| a.get(0)).and_then(|r| r.get("$ref")).and_then(Value::as_str);
    let any_of = prop
        .get("anyOf")
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find_map(|v| v.get("$ref").and_then(Value::as_str)));
    direct.or(all_of).or(any_of).and_then(|r| r.rsplit('/').next())
}

/// The methods of `side` a capability description says it covers.
fn methods_named(desc: &str, model: &Model, side: Side) -> Vec<String> {
    // The first paragraph that says "Whether ..." (unstable fields open with a warning).
    let paragraph = desc.split("\n\n").find(|p| p.trim_start().starts_with("Whether")).unwrap_or_default();
    let first = paragraph.split(['.', '\n']).next().unwrap_or_default();
    let lower = first.to_ascii_lowercase();
    if !(lower.starts_with("whether the agent supports") || lower.starts_with("whether the client support")) {
        return Vec::new();
    }
    let side_methods = || model.methods.iter().filter(move |m| m.side == side && m.is_request());
    let mut out = Vec::new();
    for quoted in first.split('`').skip(1).step_by(2) {
        if let Some(prefix) = quoted.strip_suffix("/*") {
            out.extend(side_methods().filter(|m| m.name.starts_with(&format!("{prefix}/"))).map(|m| m.name.clone()));
        } else if side_methods().any(|m| m.name == quoted) {
            out.push(quoted.to_owned());
        }
    }
    // "the logout method"
    if out.is_empty()
        && let Some(name) = lower.rsplit("the ").next().and_then(|r| r.strip_suffix(" method"))
    {
        out.extend(side_methods().filter(|m| m.name == name).map(|m| m.name.clone()));
    }
    out
}

/// `macros/src/table.rs`.
pub fn table(model: &Model, agent_caps: &[Capability], client_caps: &[Capability]) -> TokenStream {
    let handlers = |side: Side| {
        let rows = model.methods.iter().filter(|m| m.side == side).map(|m| {
            let (name, method, params, baseline) = (&m.rust, &m.name, &m.params, m.baseline);
            let response = match &m.response {
                Some(r) => quote!(Some(#r)),
                None => quote!(None),
            };
            let features: Vec<&String> = match &m.gate {
                Gate::Features(fs) => fs.iter().collect(),
                _ => Vec::new(),
            };
            quote!(Handler { name: #name, method: #method, params: #params, response: #response, baseline: #baseline, features: &[#(#features),*] },)
        });
        quote!(&[#(#rows)*])
    };
    let caps = |caps: &[Capability]| {
        let rows = caps.iter().map(|c| {
            let path = &c.path;
            let methods = &c.methods;
            let object = c.object;
            quote!(Capability { path: &[#(#path),*], object: #object, methods: &[#(#methods),*] },)
        });
        quote!(&[#(#rows)*])
    };
    let agent = handlers(Side::Agent);
    let client = handlers(Side::Client);
    let agent_caps = caps(agent_caps);
    let client_caps = caps(client_caps);
    quote! {
        //! The handlers `#[acp_agent]` and `#[acp_client]` accept, and the capabilities they earn.

        /// A method a peer may handle.
        pub struct Handler {
            /// The function name in the impl block (and in the generated trait).
            pub name: &'static str,
            /// The wire method.
            pub method: &'static str,
            /// The params type (in `acp_types`).
            pub params: &'static str,
            /// The result type, for requests.
            pub response: Option<&'static str>,
            /// Required: the spec's baseline methods.
            pub baseline: bool,
            /// The `acp-types` features it needs (any of them).
            pub features: &'static [&'static str],
        }

        /// A capability field advertised when the handlers of all its methods are present.
        pub struct Capability {
            /// JSON path inside the initialize result (agent) or params (client).
            pub path: &'static [&'static str],
            /// An object capability (`{}`) rather than a boolean (`true`).
            pub object: bool,
            pub methods: &'static [&'static str],
        }

        /// What an agent handles (the client sends it).
        pub const AGENT: &[Handler] = #agent;
        /// What a client handles (the agent sends it).
        pub const CLIENT: &[Handler] = #client;
        /// Agent capabilities, inside `InitializeResponse`.
        pub const AGENT_CAPABILITIES: &[Capability] = #agent_caps;
        /// Client capabilities, inside `InitializeRequest`.
        pub const CLIENT_CAPABILITIES: &[Capability] = #client_caps;
    }
}

/// The README's handler tables (between `<!-- handlers:begin -->` and `<!-- handlers:end -->`),
/// regenerated with the macro table so the README cannot drift from it.
pub fn readme_tables(model: &Model) -> String {
    let mut out = String::new();
    for (side, title) in [
        (Side::Agent, "`#[acp_agent]`: what the agent handles"),
        (Side::Client, "`#[acp_client]`: what the client handles"),
    ] {
        out.push_str(&format!("\n{title}\n\n| handler | method | params | result | |\n|---|---|---|---|---|\n"));
        // Baseline first, then the other stable methods, then the unstable ones.
        let mut methods: Vec<_> = model.methods.iter().filter(|m| m.side == side).collect();
        methods.sort_by_key(|m| (!m.gate.is_stable(), !m.baseline));
        for m in methods {
            let result = m.response.as_deref().map(|r| format!("`{r}`")).unwrap_or_else(|| "(notification)".into());
            let note = match (&m.gate, m.baseline) {
                (_, true) => "required".to_owned(),
                (Gate::Features(fs), _) => {
                    format!("feature {}", fs.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(" / "))
                }
                _ => String::new(),
            };
            out.push_str(&format!("| `{}` | `{}` | `{}` | {result} | {note} |\n", m.rust, m.name, m.params));
        }
    }
    out.push('\n');
    out
}

/// Replaces the region between the handler markers of `readme`; `None` when the markers are missing.
pub fn splice_readme(readme: &str, tables: &str) -> Option<String> {
    const BEGIN: &str = "<!-- handlers:begin (generated by `cargo xtask codegen`) -->";
    const END: &str = "<!-- handlers:end -->";
    let start = readme.find(BEGIN)? + BEGIN.len();
    let end = readme[start..].find(END)? + start;
    Some(format!("{}{tables}{}", &readme[..start], &readme[end..]))
}
