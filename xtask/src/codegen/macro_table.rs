//! The method table of `#[acp_agent]` / `#[acp_client]` (`macros/src/table.rs`), generated with
//! the bindings so the macros know exactly the handlers the traits have: names, params and
//! result types, baseline or optional, features, and which capability each handler earns.
//!
//! Capabilities are read off the schema's own words: a capability field whose description
//! starts "Whether the agent (client) supports `METHOD`" (or "the METHOD method", or
//! "all `PREFIX/*` methods") is advertised when the handlers for those methods are present.
//!
//! So are protocol v2's groups, handlers that come all together or not at all: a field whose
//! description (or its type's) says that supplying it commits the agent to "the baseline
//! session methods: `session/new`, ..." or that the agent "MUST support both `auth/login` and
//! `auth/logout`". A group whose field is a capability object (`capabilities.session`) is
//! advertised when all its handlers are present.

use proc_macro2::TokenStream;
use quote::quote;
use serde_json::{Map, Value};

use super::ir::{Gate, Model, Side};

/// One capability field, as a JSON path inside the initialize params or result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Capability {
    /// Property names from the root definition down to the field.
    pub path: Vec<String>,
    /// `true` for a boolean field, `{}` for an object one.
    pub object: bool,
    /// The methods its description names: the handlers of all of them earn it.
    pub methods: Vec<String>,
}

/// Handlers that go together (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Group {
    /// The field whose description names the group; advertised (`{}`) when `advertised`.
    pub path: Vec<String>,
    /// The field is a capability object (`capabilities.session`).
    pub advertised: bool,
    /// The methods of the group, as its descriptions name them.
    pub methods: Vec<String>,
}

/// The groups of the `root` definition's fields (`InitializeResponse`), recursively.
pub(crate) fn groups(defs: &Map<String, Value>, root: &str, model: &Model, side: Side) -> Vec<Group> {
    let mut out = Vec::new();
    walk_groups(defs, root, &mut Vec::new(), model, side, &mut out, 0);
    out
}

fn walk_groups(
    defs: &Map<String, Value>,
    def: &str,
    path: &mut Vec<String>,
    model: &Model,
    side: Side,
    out: &mut Vec<Group>,
    depth: usize,
) {
    let Some(props) = defs.get(def).and_then(|d| d.get("properties")).and_then(Value::as_object) else { return };
    if depth > 4 {
        return;
    }
    for (name, prop) in props {
        path.push(name.clone());
        let target = referenced(prop);
        let own = prop.get("description").and_then(Value::as_str).unwrap_or_default();
        let of_type = target.and_then(|t| defs.get(t)?.get("description")?.as_str()).unwrap_or_default();
        let capability = target.is_some_and(|t| t.ends_with("Capabilities"));
        let methods = group_methods(&format!("{own}\n\n{of_type}"), model, side);
        if methods.len() >= 2 {
            out.push(Group { path: path.clone(), advertised: capability, methods });
        }
        if let Some(t) = target.filter(|_| capability) {
            walk_groups(defs, t, path, model, side, out, depth + 1);
        }
        path.pop();
    }
}

/// The methods of `side` the "commits to all of these" sentences name (the field's own
/// description and its type's may each list some: the union).
fn group_methods(desc: &str, model: &Model, side: Side) -> Vec<String> {
    let flat = desc.replace('\n', " ");
    let sentences = flat.split(". ").filter(|s| s.contains("supports the baseline") || s.contains("MUST support both"));
    let mut out: Vec<String> = Vec::new();
    for quoted in sentences.flat_map(|s| s.split('`').skip(1).step_by(2)) {
        if model.methods.iter().any(|m| m.side == side && m.name == quoted) && !out.iter().any(|m| m == quoted) {
            out.push(quoted.to_owned());
        }
    }
    out
}

/// The capability fields of the `root` definition (e.g. `InitializeResponse`), recursively.
pub(crate) fn capabilities(defs: &Map<String, Value>, root: &str, model: &Model, side: Side) -> Vec<Capability> {
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

/// The handlers and capabilities of one protocol version, for the table.
pub(crate) struct VersionTable<'a> {
    /// The version's merged model: its handlers.
    pub model: &'a Model,
    /// The capability fields of `InitializeResponse`.
    pub agent_caps: Vec<Capability>,
    /// The capability fields of `InitializeRequest`.
    pub client_caps: Vec<Capability>,
    /// The handler groups of `InitializeResponse`.
    pub agent_groups: Vec<Group>,
}

/// `macros/src/table.rs`: v1's tables, and v2's (empty when the release has no v2).
pub(crate) fn table(v1: &VersionTable<'_>, v2: Option<&VersionTable<'_>>) -> TokenStream {
    let handlers = |model: Option<&Model>, side: Side| {
        let rows = model.into_iter().flat_map(|m| &m.methods).filter(|m| m.side == side).map(|m| {
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
    let caps = |caps: Option<&Vec<Capability>>| {
        let rows = caps.into_iter().flatten().map(|c| {
            let path = &c.path;
            let methods = &c.methods;
            let object = c.object;
            quote!(Capability { path: &[#(#path),*], object: #object, methods: &[#(#methods),*] },)
        });
        quote!(&[#(#rows)*])
    };
    let groups = |groups: Option<&Vec<Group>>| {
        let rows = groups.into_iter().flatten().map(|g| {
            let path = &g.path;
            let methods = &g.methods;
            let advertised = g.advertised;
            quote!(Group { path: &[#(#path),*], advertised: #advertised, methods: &[#(#methods),*] },)
        });
        quote!(&[#(#rows)*])
    };
    let agent = handlers(Some(v1.model), Side::Agent);
    let client = handlers(Some(v1.model), Side::Client);
    let agent_caps = caps(Some(&v1.agent_caps));
    let client_caps = caps(Some(&v1.client_caps));
    let agent_v2 = handlers(v2.map(|v| v.model), Side::Agent);
    let client_v2 = handlers(v2.map(|v| v.model), Side::Client);
    let agent_caps_v2 = caps(v2.map(|v| &v.agent_caps));
    let client_caps_v2 = caps(v2.map(|v| &v.client_caps));
    let agent_groups_v2 = groups(v2.map(|v| &v.agent_groups));
    quote! {
        //! The handlers `#[acp_agent]` and `#[acp_client]` accept, and the capabilities they earn,
        //! for protocol v1 and (with `v2`) protocol v2.

        /// A method a peer may handle.
        pub struct Handler {
            /// The function name in the impl block (and in the generated trait).
            pub name: &'static str,
            /// The wire method.
            pub method: &'static str,
            /// The params type (in `acp_types`, or `acp_types::v2`).
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

        /// Handlers that come all together or not at all (protocol v2).
        pub struct Group {
            /// The field of the initialize result whose description names the group.
            pub path: &'static [&'static str],
            /// Advertised (`{}`) when every handler of the group is present.
            pub advertised: bool,
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
        /// Protocol v2: what an agent handles.
        pub const AGENT_V2: &[Handler] = #agent_v2;
        /// Protocol v2: what a client handles.
        pub const CLIENT_V2: &[Handler] = #client_v2;
        /// Protocol v2: agent capabilities, inside `InitializeResponse`.
        pub const AGENT_V2_CAPABILITIES: &[Capability] = #agent_caps_v2;
        /// Protocol v2: client capabilities, inside `InitializeRequest`.
        pub const CLIENT_V2_CAPABILITIES: &[Capability] = #client_caps_v2;
        /// Protocol v2: the agent's handler groups.
        pub const AGENT_V2_GROUPS: &[Group] = #agent_groups_v2;
    }
}

/// The handler tables of the book's `handlers.md` page (between `<!-- handlers:begin -->` and
/// `<!-- handlers:end -->`), regenerated with the macro table so the page cannot drift from it.
pub fn readme_tables(v1: &Model, v2: Option<&Model>) -> String {
    let mut out = String::new();
    let v1_tables = [
        (v1, Side::Agent, "`#[acp_agent]`: what the agent handles"),
        (v1, Side::Client, "`#[acp_client]`: what the client handles"),
    ];
    let v2_tables = v2.map(|v2| {
        [
            (v2, Side::Agent, "`#[acp_agent(v2)]` (feature `unstable_protocol_v2`): what a v2 agent handles"),
            (v2, Side::Client, "`#[acp_client(v2)]` (feature `unstable_protocol_v2`): what a v2 client handles"),
        ]
    });
    for (model, side, title) in v1_tables.into_iter().chain(v2_tables.into_iter().flatten()) {
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

const README_BEGIN: &str = "<!-- handlers:begin (generated by `cargo xtask codegen`) -->";
const README_END: &str = "<!-- handlers:end -->";

/// Where the generated region of `readme` starts and ends; `None` when the markers are missing.
fn readme_span(readme: &str) -> Option<std::ops::Range<usize>> {
    let start = readme.find(README_BEGIN)? + README_BEGIN.len();
    let end = readme[start..].find(README_END)? + start;
    Some(start..end)
}

/// The generated region of `readme` (what [`readme_tables`] wrote there).
pub fn readme_region(readme: &str) -> Option<&str> {
    readme_span(readme).map(|span| &readme[span])
}

/// Replaces the region between the handler markers of `readme`; `None` when the markers are missing.
pub fn splice_readme(readme: &str, tables: &str) -> Option<String> {
    let span = readme_span(readme)?;
    Some(format!("{}{tables}{}", &readme[..span.start], &readme[span.end..]))
}
