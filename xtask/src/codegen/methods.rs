//! The method table: which peer handles which method, with which params and result.
//!
//! The source of truth is the `x-method` / `x-side` pair on the `*Request`, `*Response` and
//! `*Notification` definitions: a method with a `*Response` definition is a request, otherwise
//! a notification. `meta.json` names the Rust functions and is cross-checked against the
//! schema in both directions.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::classify::doc_of;
use super::ir::{Gate, Method, Side};
use super::{CodegenError, Result};

/// The spec's baseline methods (overview page, "Baseline Methods"): a peer is not usable
/// without them, so the macros require a handler and the traits give no default. The spec
/// prose is the only place this is stated; every entry must name a method of the schema of
/// its protocol version (`meta.json`'s `version`).
pub const BASELINE: &[(u64, Side, &str)] = &[
    (1, Side::Agent, "initialize"),
    (1, Side::Agent, "authenticate"),
    (1, Side::Agent, "session/new"),
    (1, Side::Agent, "session/prompt"),
    (1, Side::Agent, "session/cancel"),
    (1, Side::Client, "session/request_permission"),
    (1, Side::Client, "session/update"),
    // v2 adds the session lifecycle a `session` capability commits to. `auth/login` and
    // `auth/logout` stay optional: they are owed only by an agent that advertises
    // `authMethods` (`#[acp_agent(v2)]` requires them as a pair).
    (2, Side::Agent, "initialize"),
    (2, Side::Agent, "session/new"),
    (2, Side::Agent, "session/prompt"),
    (2, Side::Agent, "session/list"),
    (2, Side::Agent, "session/resume"),
    (2, Side::Agent, "session/close"),
    (2, Side::Agent, "session/cancel"),
    (2, Side::Client, "session/request_permission"),
    (2, Side::Client, "session/update"),
];

#[derive(Default)]
struct Forms<'s> {
    request: Option<(&'s str, &'s Value)>,
    response: Option<&'s str>,
    notification: Option<(&'s str, &'s Value)>,
}

/// Protocol-level methods (`$/...`): the method name and its params type.
pub type ProtocolMethods = Vec<(String, String)>;

/// Builds the method table of a schema, and the protocol-level methods with their params type.
pub fn method_table(defs: &Map<String, Value>, meta: &Value) -> Result<(Vec<Method>, ProtocolMethods)> {
    let mut forms: BTreeMap<(Side, &str), Forms> = BTreeMap::new();
    let mut order: Vec<(Side, &str)> = Vec::new();
    let mut protocol = Vec::new();
    for (name, def) in defs {
        let (Some(method), Some(side)) =
            (def.get("x-method").and_then(Value::as_str), def.get("x-side").and_then(Value::as_str))
        else {
            continue;
        };
        let sides: &[Side] = match side {
            "agent" => &[Side::Agent],
            "client" => &[Side::Client],
            "both" => &[Side::Agent, Side::Client],
            "protocol" => {
                protocol.push((method.to_owned(), name.clone()));
                continue;
            }
            other => return Err(CodegenError::unsupported(name, &format!("`x-side: {other}`"))),
        };
        for &side in sides {
            let entry = forms.entry((side, method)).or_insert_with(|| {
                order.push((side, method));
                Forms::default()
            });
            let slot = if name.ends_with("Request") {
                entry.request.replace((name, def)).map(|(n, _)| n)
            } else if name.ends_with("Response") {
                entry.response.replace(name)
            } else if name.ends_with("Notification") {
                entry.notification.replace((name, def)).map(|(n, _)| n)
            } else {
                return Err(CodegenError::unsupported(
                    name,
                    "an `x-method` definition not named *Request, *Response or *Notification",
                ));
            };
            if let Some(previous) = slot {
                return Err(CodegenError::unsupported(
                    name,
                    &format!("a second definition for `{method}` besides `{previous}`"),
                ));
            }
        }
    }

    let meta_names = MetaNames::new(meta)?;
    let version = meta.get("version").and_then(Value::as_u64).unwrap_or(1);
    let baseline: Vec<(Side, &str)> =
        BASELINE.iter().filter(|(v, ..)| *v == version).map(|&(_, side, name)| (side, name)).collect();
    let mut methods = Vec::new();
    for key in order {
        let (side, method) = key;
        let f = &forms[&key];
        let rust = meta_names.lookup(side, method).ok_or_else(|| {
            CodegenError::table(&format!("the schema's `{method}` ({side:?} side) is missing from meta.json"))
        })?;
        if let Some((params, def)) = f.request {
            let response = f.response.ok_or_else(|| {
                CodegenError::unsupported(params, &format!("request `{method}` without a *Response definition"))
            })?;
            methods.push(Method {
                name: method.to_owned(),
                rust: rust.clone(),
                side,
                params: params.to_owned(),
                response: Some(response.to_owned()),
                doc: doc_of(def),
                baseline: baseline.contains(&(side, method)),
                gate: Gate::Stable,
            });
        } else if let Some(response) = f.response {
            return Err(CodegenError::unsupported(response, &format!("a response for `{method}` without a request")));
        }
        if let Some((params, def)) = f.notification {
            // `mcp/message` is both a request and a notification on the same side.
            let rust = if f.request.is_some() { format!("{rust}_notification") } else { rust };
            methods.push(Method {
                name: method.to_owned(),
                rust,
                side,
                params: params.to_owned(),
                response: None,
                doc: doc_of(def),
                baseline: baseline.contains(&(side, method)),
                gate: Gate::Stable,
            });
        }
    }

    for &(side, name) in &baseline {
        if !methods.iter().any(|m| m.side == side && m.name == name) {
            return Err(CodegenError::table(&format!("baseline method `{name}` ({side:?} side) is not in the schema")));
        }
    }
    meta_names.cross_check(&methods)?;
    Ok((methods, protocol))
}

/// `meta.json`: `agentMethods` / `clientMethods` map Rust function names to wire names.
struct MetaNames {
    by_side: BTreeMap<(Side, String), String>,
}

impl MetaNames {
    fn new(meta: &Value) -> Result<Self> {
        let mut by_side = BTreeMap::new();
        for (key, side) in [("agentMethods", Side::Agent), ("clientMethods", Side::Client)] {
            let Some(table) = meta.get(key).and_then(Value::as_object) else {
                return Err(CodegenError::table(&format!("meta.json has no `{key}` object")));
            };
            for (rust, wire) in table {
                let wire = wire
                    .as_str()
                    .ok_or_else(|| CodegenError::table(&format!("meta.json `{key}.{rust}` is not a string")))?;
                by_side.insert((side, wire.to_owned()), rust.clone());
            }
        }
        Ok(MetaNames { by_side })
    }

    fn lookup(&self, side: Side, method: &str) -> Option<String> {
        self.by_side.get(&(side, method.to_owned())).cloned()
    }

    /// Every meta entry names a schema method of that side (the other direction, every schema
    /// method in meta, is checked by [`Self::lookup`]'s caller).
    fn cross_check(&self, methods: &[Method]) -> Result<()> {
        for ((side, wire), rust) in &self.by_side {
            if !methods.iter().any(|m| m.side == *side && &m.name == wire) {
                return Err(CodegenError::table(&format!(
                    "meta.json names `{rust}` = `{wire}` for the {side:?} side, but the schema has no such method"
                )));
            }
        }
        Ok(())
    }
}
