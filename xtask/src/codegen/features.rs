//! Unstable features: what exists only in `schema.unstable.json` is compiled behind cargo
//! features.
//!
//! The schema does not say which feature gates what, so [`FEATURES`] is the one hand-written
//! table of the generator. Its entries are roots (a method, a field, a union variant or a
//! definition); every unstable-only definition is gated by the features whose roots reach it.
//! The merge fails when an entry names nothing in the schema, or when an unstable-only item
//! is reached by no entry, so the table cannot silently drift from the schema.

use std::collections::{BTreeMap, BTreeSet};

use super::ir::*;
use super::{CodegenError, Result};

/// One cargo feature: the unstable capability it turns on, as roots in each protocol
/// version's unstable schema. A capability that both versions have is one feature (in v2 it
/// also needs the `v2` module's own feature), so a crate opts into it once for both.
pub struct Feature {
    /// The cargo feature, e.g. `unstable_nes`.
    pub name: &'static str,
    /// Roots in protocol v1's `schema.unstable.json`: `method:NAME`, `field:Type.property`,
    /// `variant:Type.tag`, `def:Type`.
    pub v1: &'static [&'static str],
    /// Roots in protocol v2's `schema.unstable.json`, in the same form.
    pub v2: &'static [&'static str],
}

/// The features of the pinned release: every unstable-only method, field and variant of both
/// protocol versions is reached from exactly the roots listed here. Names follow the official
/// Rust crate's where it has the same capability, so a project can move between the two.
pub const FEATURES: &[Feature] = &[
    Feature {
        name: "unstable_llm_providers",
        v1: &[
            "method:providers/list",
            "method:providers/set",
            "method:providers/disable",
            "field:AgentCapabilities.providers",
        ],
        v2: &[
            "method:providers/list",
            "method:providers/set",
            "method:providers/disable",
            "field:AgentCapabilities.providers",
        ],
    },
    // Since the schema of the TypeScript SDK 2.4 only `mcp/message` remains: a request's
    // `serverId` names the server, no connection is opened or closed first.
    Feature {
        name: "unstable_mcp_over_acp",
        v1: &["method:mcp/message", "field:McpCapabilities.acp", "variant:McpServer.acp"],
        v2: &["method:mcp/message", "field:McpCapabilities.acp", "variant:McpServer.acp"],
    },
    // What a conductor sends to the proxies of its chain (`x-side: "proxy"`).
    Feature {
        name: "unstable_proxy_chains",
        v1: &["method:proxy/initialize", "method:proxy/successor"],
        v2: &["method:proxy/initialize", "method:proxy/successor"],
    },
    Feature {
        name: "unstable_session_fork",
        v1: &["method:session/fork", "field:SessionCapabilities.fork"],
        v2: &["method:session/fork", "field:SessionCapabilities.fork"],
    },
    Feature {
        name: "unstable_session_archive",
        v1: &[
            "method:session/archive",
            "method:session/unarchive",
            "field:SessionCapabilities.archive",
            "field:ListSessionsRequest.archived",
            "field:SessionInfo.archived",
        ],
        v2: &[
            "method:session/archive",
            "method:session/unarchive",
            "field:SessionCapabilities.archive",
            "field:ListSessionsRequest.archived",
            "field:SessionInfo.archived",
        ],
    },
    Feature {
        name: "unstable_session_status",
        v1: &["method:session/status", "field:SessionCapabilities.status"],
        v2: &["method:session/status", "field:SessionCapabilities.status"],
    },
    Feature {
        name: "unstable_session_set_title",
        v1: &["method:session/set_title", "field:SessionCapabilities.title"],
        v2: &["method:session/set_title", "field:SessionCapabilities.title"],
    },
    Feature {
        name: "unstable_auth_status",
        v1: &["method:auth/status", "method:auth/status_update", "field:AgentAuthCapabilities.status"],
        v2: &["method:auth/status", "method:auth/status_update", "field:AgentAuthCapabilities.status"],
    },
    // A system prompt chosen by the client when a session starts (`session/fork` has the
    // field too, under its own feature).
    Feature {
        name: "unstable_system_prompt",
        v1: &[
            "field:SessionCapabilities.systemPrompt",
            "field:NewSessionRequest.systemPrompt",
            "field:LoadSessionRequest.systemPrompt",
            "field:ResumeSessionRequest.systemPrompt",
        ],
        v2: &[
            "field:SessionCapabilities.systemPrompt",
            "field:NewSessionRequest.systemPrompt",
            "field:ResumeSessionRequest.systemPrompt",
        ],
    },
    // Child sessions a session starts and owns, and the background work they are in v2.
    Feature {
        name: "unstable_subagents",
        v1: &["field:ClientCapabilities.subagents", "variant:SessionUpdate.subagent_update"],
        v2: &["variant:SessionUpdate.subagent_update", "variant:BackgroundWork.subagent"],
    },
    // Messages between sessions (a parent and its subagents), whole or streamed.
    Feature {
        name: "unstable_session_messages",
        v1: &["variant:SessionUpdate.session_message", "variant:SessionUpdate.session_message_chunk"],
        v2: &["variant:SessionUpdate.session_message", "variant:SessionUpdate.session_message_chunk"],
    },
    // v2's `state_update` for an agent that cannot tell what it is doing (in v1 the state
    // updates exist only inside `subagent_update`).
    Feature { name: "unstable_unknown_state", v1: &[], v2: &["variant:StateUpdate.unknown"] },
    // Token usage of finished foreground work: on the prompt's answer in v1, on the idle
    // `state_update` in v2 (where the turn ends).
    Feature {
        name: "unstable_end_turn_token_usage",
        v1: &["field:PromptResponse.usage"],
        v2: &["field:IdleStateUpdate.usage"],
    },
    // `plan_update` itself is stable in v2; its removal and its non-item contents are not.
    Feature {
        name: "unstable_plan_updates",
        v1: &[
            "variant:SessionUpdate.plan_update",
            "variant:SessionUpdate.plan_removed",
            "field:ClientCapabilities.plan",
        ],
        v2: &[
            "variant:SessionUpdate.plan_removed",
            "variant:PlanUpdateContent.file",
            "variant:PlanUpdateContent.markdown",
        ],
    },
];

/// Features of earlier pins whose capability left the unstable schema: stabilised, or removed
/// upstream. The generated crate still declares them, gating nothing, so that a `Cargo.toml`
/// naming one keeps building; each line says what became of it.
pub const RETIRED: &[(&str, &str)] = &[
    ("unstable_nes", "removed upstream (next edit suggestions and the document notifications)"),
    ("unstable_context_compaction", "stable: compaction updates need no feature"),
    ("unstable_tool_call_name", "stable: a tool call's `name` needs no feature"),
];

impl Feature {
    /// The roots of this feature in the schema of `protocol` (1 or 2).
    pub fn roots(&self, protocol: u16) -> &'static [&'static str] {
        match protocol {
            2 => self.v2,
            _ => self.v1,
        }
    }
}

/// How unstable-only items are gated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gating {
    /// By [`FEATURES`] (the pinned release).
    Table,
    /// Everything behind the one `unstable` feature (other releases, whose unstable surface
    /// the table does not describe).
    AllInOne,
}

/// The generated crate's feature that turns on all the unstable ones (v2's included); under
/// [`Gating::AllInOne`] it gates every unstable-only item itself.
pub(crate) const UMBRELLA: &str = "unstable";

/// Merges the stable and the unstable model: the result is the unstable model with every
/// item, field, variant and method that the stable model lacks gated by its features.
pub fn merge(stable: &Model, unstable: &Model, gating: Gating) -> Result<Model> {
    let stable_items: BTreeMap<&str, &Item> = stable.items.iter().map(|i| (i.name.as_str(), i)).collect();
    let unstable_items: BTreeMap<&str, &Item> = unstable.items.iter().map(|i| (i.name.as_str(), i)).collect();
    let is_new_method = |m: &Method| {
        !stable.methods.iter().any(|s| s.name == m.name && s.side == m.side && s.is_request() == m.is_request())
    };

    // Which features gate what.
    let mut item_gates: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut member_gates: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut method_gates: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let table: Vec<(String, Vec<String>)> = match gating {
        Gating::Table => {
            let protocol = unstable.protocol_version.unwrap_or(1);
            let mut table = Vec::new();
            for f in FEATURES {
                if f.v1.is_empty() && f.v2.is_empty() {
                    return Err(CodegenError::table(&format!("feature `{}` has no roots in either version", f.name)));
                }
                table.push((f.name.to_owned(), f.roots(protocol).iter().map(|r| r.to_string()).collect()));
            }
            table
        }
        Gating::AllInOne => vec![(UMBRELLA.to_owned(), all_in_one_roots(stable, unstable))],
    };
    for (feature, roots) in &table {
        let mut reach: Vec<String> = Vec::new();
        for root in roots {
            let (kind, target) = root.split_once(':').ok_or_else(|| {
                CodegenError::table(&format!("feature `{feature}`: entry `{root}` is not KIND:TARGET"))
            })?;
            match kind {
                "method" => {
                    let found: Vec<&Method> = unstable.methods.iter().filter(|m| m.name == target).collect();
                    if found.is_empty() {
                        return Err(names_nothing(feature, root, unstable.protocol_version));
                    }
                    method_gates.entry(target.to_owned()).or_default().insert(feature.clone());
                    for m in found {
                        reach.push(m.params.clone());
                        reach.extend(m.response.clone());
                    }
                }
                "field" | "variant" => {
                    let (ty, member) = target
                        .split_once('.')
                        .ok_or_else(|| names_nothing(feature, root, unstable.protocol_version))?;
                    let item = unstable_items
                        .get(ty)
                        .ok_or_else(|| names_nothing(feature, root, unstable.protocol_version))?;
                    let refs = member_refs(item, kind, member)
                        .ok_or_else(|| names_nothing(feature, root, unstable.protocol_version))?;
                    reach.extend(refs);
                    member_gates.entry(format!("{ty}.{member}")).or_default().insert(feature.clone());
                }
                "def" => {
                    if !unstable_items.contains_key(target) {
                        return Err(names_nothing(feature, root, unstable.protocol_version));
                    }
                    reach.push(target.to_owned());
                }
                _ => return Err(CodegenError::table(&format!("feature `{feature}`: unknown entry kind in `{root}`"))),
            }
        }
        // Everything unstable-only that the roots reach.
        let mut seen = BTreeSet::new();
        while let Some(name) = reach.pop() {
            if stable_items.contains_key(name.as_str()) || !seen.insert(name.clone()) {
                continue;
            }
            if let Some(item) = unstable_items.get(name.as_str()) {
                item_gates.entry(name.clone()).or_default().insert(feature.clone());
                reach.extend(item.references().into_iter().map(str::to_owned));
            }
        }
    }

    let gate_of = |gates: Option<&BTreeSet<String>>, what: &str| -> Result<Gate> {
        match gates {
            Some(g) if !g.is_empty() => Ok(Gate::Features(g.clone())),
            _ => Err(CodegenError::table(&format!(
                "{what} exists only in the unstable schema and no entry of the feature table reaches it"
            ))),
        }
    };

    let mut items = Vec::new();
    for item in &unstable.items {
        let mut item = item.clone();
        match stable_items.get(item.name.as_str()) {
            None => item.gate = gate_of(item_gates.get(&item.name), &format!("definition `{}`", item.name))?,
            Some(old) => {
                keep_stable_docs(&mut item, old);
                let gated =
                    gate_members(&mut item, old, &|member| gate_of(member_gates.get(member), &format!("`{member}`")));
                match (gated, gating) {
                    (Ok(()), _) => {}
                    // A definition whose shape changed: both shapes, on either side of the
                    // one feature. The table cannot say which feature owns such a change.
                    (Err(CodegenError::Unsupported { .. }), Gating::AllInOne) => {
                        let mut stable_shape = (*old).clone();
                        stable_shape.gate = Gate::WithoutFeature(UMBRELLA.to_owned());
                        items.push(stable_shape);
                        item = unstable_items[item.name.as_str()].clone();
                        item.gate = Gate::feature(UMBRELLA);
                    }
                    (Err(e), _) => return Err(e),
                }
            }
        }
        items.push(item);
    }
    let mut methods = Vec::new();
    for m in &unstable.methods {
        let mut m = m.clone();
        if is_new_method(&m) {
            m.gate = gate_of(method_gates.get(&m.name), &format!("method `{}`", m.name))?;
        }
        methods.push(m);
    }
    Ok(Model {
        items,
        methods,
        protocol_methods: unstable.protocol_methods.clone(),
        protocol_version: unstable.protocol_version,
    })
}

/// Every unstable-only method, field and variant, for [`Gating::AllInOne`].
fn all_in_one_roots(stable: &Model, unstable: &Model) -> Vec<String> {
    let mut roots = Vec::new();
    for m in &unstable.methods {
        if !stable.methods.iter().any(|s| s.name == m.name && s.side == m.side) {
            roots.push(format!("method:{}", m.name));
        }
    }
    for item in &unstable.items {
        let Some(old) = stable.items.iter().find(|i| i.name == item.name) else {
            roots.push(format!("def:{}", item.name));
            continue;
        };
        match (&item.kind, &old.kind) {
            (ItemKind::Struct(new), ItemKind::Struct(old)) => {
                for f in &new.fields {
                    if !old.fields.iter().any(|o| o.wire == f.wire) {
                        roots.push(format!("field:{}.{}", item.name, f.wire));
                    }
                }
            }
            (ItemKind::Tagged(new), ItemKind::Tagged(old)) => {
                for v in &new.variants {
                    if !old.variants.iter().any(|o| o.wire == v.wire) {
                        roots.push(format!("variant:{}.{}", item.name, v.wire));
                    }
                }
            }
            (ItemKind::StringEnum(new), ItemKind::StringEnum(old)) => {
                for v in new {
                    if !old.iter().any(|o| o.wire == v.wire) {
                        roots.push(format!("variant:{}.{}", item.name, v.wire));
                    }
                }
            }
            _ => {}
        }
    }
    roots
}

/// The type names a field or variant refers to, or `None` if it does not exist.
fn member_refs(item: &Item, kind: &str, member: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    match (&item.kind, kind) {
        (ItemKind::Struct(s), "field") => s.fields.iter().find(|f| f.wire == member)?.ty.visit_names(&mut out),
        (ItemKind::Tagged(t), "variant") => match &t.variants.iter().find(|v| v.wire == member)?.payload {
            Payload::Unit => {}
            Payload::Type(n) => out.push(n),
            Payload::Property { ty, .. } => ty.visit_names(&mut out),
        },
        (ItemKind::StringEnum(vs), "variant") => {
            vs.iter().find(|v| v.wire == member)?;
        }
        _ => return None,
    }
    Some(out.into_iter().map(str::to_owned).collect())
}

/// Gives the parts of `new` that the stable definition `old` also has the stable descriptions:
/// they are the released text (v2's unstable schema links every page to its draft instead).
fn keep_stable_docs(new: &mut Item, old: &Item) {
    new.doc.clone_from(&old.doc);
    match (&mut new.kind, &old.kind) {
        (ItemKind::Struct(n), ItemKind::Struct(o)) => {
            for f in &mut n.fields {
                if let Some(of) = o.fields.iter().find(|of| of.wire == f.wire) {
                    f.doc.clone_from(&of.doc);
                }
            }
        }
        (ItemKind::Tagged(n), ItemKind::Tagged(o)) => {
            for v in &mut n.variants {
                if let Some(ov) = o.variants.iter().find(|ov| ov.wire == v.wire) {
                    v.doc.clone_from(&ov.doc);
                }
            }
            if let (Some(nd), Some(od)) = (&mut n.untagged_default, &o.untagged_default) {
                nd.doc.clone_from(&od.doc);
            }
        }
        (ItemKind::StringEnum(n), ItemKind::StringEnum(o)) => {
            for v in n.iter_mut() {
                if let Some(ov) = o.iter().find(|ov| ov.wire == v.wire) {
                    v.doc.clone_from(&ov.doc);
                }
            }
        }
        (ItemKind::Untagged(n), ItemKind::Untagged(o)) => {
            for v in n.iter_mut() {
                if let Some(ov) = o.iter().find(|ov| ov.name == v.name) {
                    v.doc.clone_from(&ov.doc);
                }
            }
        }
        (ItemKind::IntConsts { consts: n, .. }, ItemKind::IntConsts { consts: o, .. }) => {
            for c in n.iter_mut() {
                if let Some(oc) = o.iter().find(|oc| oc.name == c.name) {
                    c.doc.clone_from(&oc.doc);
                }
            }
        }
        _ => {}
    }
}

/// Gates the fields and variants `new` has and `old` lacks; any other difference in shape
/// between the stable and the unstable definition is an error.
fn gate_members(new: &mut Item, old: &Item, gate_of: &dyn Fn(&str) -> Result<Gate>) -> Result<()> {
    let name = new.name.clone();
    let changed = |what: &str| {
        CodegenError::unsupported(&name, &format!("a {what} that differs between the stable and the unstable schema"))
    };
    match (&mut new.kind, &old.kind) {
        (ItemKind::Struct(n), ItemKind::Struct(o)) => {
            for f in &mut n.fields {
                match o.fields.iter().find(|of| of.wire == f.wire) {
                    Some(of) if of.ty != f.ty || of.required != f.required => {
                        return Err(changed(&format!("field `{}`", f.wire)));
                    }
                    Some(_) => {}
                    None => f.gate = gate_of(&format!("{name}.{}", f.wire))?,
                }
            }
            // The flattened union's doc may differ (an unstable variant mentioned); its shape may not.
            let shape = |f: &Option<Flatten>| f.as_ref().map(|f| (f.field.clone(), f.ty.clone(), f.optional));
            if o.fields.iter().any(|of| !n.fields.iter().any(|f| f.wire == of.wire))
                || shape(&n.flatten) != shape(&o.flatten)
            {
                return Err(changed("set of fields"));
            }
        }
        (ItemKind::Tagged(n), ItemKind::Tagged(o)) => {
            for v in &mut n.variants {
                match o.variants.iter().find(|ov| ov.wire == v.wire) {
                    Some(ov) if ov.payload != v.payload => return Err(changed(&format!("variant `{}`", v.wire))),
                    Some(_) => {}
                    None => v.gate = gate_of(&format!("{name}.{}", v.wire))?,
                }
            }
        }
        (ItemKind::StringEnum(n), ItemKind::StringEnum(o)) => {
            for v in n.iter_mut() {
                if !o.iter().any(|ov| ov.wire == v.wire) {
                    v.gate = gate_of(&format!("{name}.{}", v.wire))?;
                }
            }
        }
        (n, o) if n == o => {}
        _ => return Err(changed("shape")),
    }
    Ok(())
}

fn names_nothing(feature: &str, root: &str, protocol: Option<u16>) -> CodegenError {
    let schema = protocol.map_or("the unstable schema".to_owned(), |v| format!("the unstable schema of protocol v{v}"));
    CodegenError::table(&format!("feature `{feature}`: entry `{root}` names nothing in {schema}"))
}

/// The features a generated crate declares.
pub fn feature_names(gating: Gating) -> Vec<&'static str> {
    match gating {
        Gating::Table => FEATURES.iter().map(|f| f.name).collect(),
        Gating::AllInOne => Vec::new(),
    }
}
