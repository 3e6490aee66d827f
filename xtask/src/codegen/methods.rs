//! The method table: which peer handles which method, with which params and result.
//!
//! The source of truth is the `x-method` / `x-side` pair on the `*Request`, `*Response` and
//! `*Notification` definitions: a method with a `*Response` definition is a request, otherwise
//! a notification. A method's Rust name is its wire name in snake case (`document/didOpen` →
//! `document_did_open`). `meta.json`, which upstream's repository releases carry and the
//! published packages do not, is cross-checked against that table in both directions: the
//! same methods on the same sides, under the same Rust names.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::classify::doc_of;
use super::ir::{Gate, Method, Side};
use super::naming::snake;
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

/// The Rust name of a method: its wire name in snake case, `/` becoming `_`
/// (`session/set_mode` → `session_set_mode`, `document/didOpen` → `document_did_open`).
pub fn rust_name(wire: &str) -> String {
    snake(wire)
}

/// Builds the method table of a schema (protocol version `version`), and the protocol-level
/// methods with their params type; `meta`, when the release has a `meta.json`, is
/// cross-checked against it.
pub fn method_table(
    defs: &Map<String, Value>,
    meta: Option<&Value>,
    version: u16,
) -> Result<(Vec<Method>, ProtocolMethods)> {
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
            // What a conductor and its proxies say to each other (`proxy/initialize`,
            // `proxy/successor`): neither the agent's methods nor the client's.
            "proxy" => &[Side::Proxy],
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

    let meta_names = meta.map(MetaNames::new).transpose()?;
    let baseline: Vec<(Side, &str)> =
        BASELINE.iter().filter(|(v, ..)| *v == u64::from(version)).map(|&(_, side, name)| (side, name)).collect();
    let mut methods = Vec::new();
    for key in order {
        let (side, method) = key;
        let f = &forms[&key];
        let rust = rust_name(method);
        if let Some(meta_names) = &meta_names {
            meta_names.check(side, method, &rust)?;
        }
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
    if let Some(meta_names) = &meta_names {
        meta_names.cross_check(&methods)?;
    }
    Ok((methods, protocol))
}

/// `meta.json`: `agentMethods` / `clientMethods` (and `proxyMethods`, should a release
/// write one) map Rust function names to wire names.
struct MetaNames {
    by_side: BTreeMap<(Side, String), String>,
}

impl MetaNames {
    fn new(meta: &Value) -> Result<Self> {
        let mut by_side = BTreeMap::new();
        for (key, side, required) in [
            ("agentMethods", Side::Agent, true),
            ("clientMethods", Side::Client, true),
            ("proxyMethods", Side::Proxy, false),
        ] {
            let table = match meta.get(key).and_then(Value::as_object) {
                Some(table) => table,
                None if !required => continue,
                None => return Err(CodegenError::table(&format!("meta.json has no `{key}` object"))),
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

    /// The schema's method `wire` (on `side`, Rust name `rust`) is in meta.json, under that name.
    fn check(&self, side: Side, wire: &str, rust: &str) -> Result<()> {
        match self.by_side.get(&(side, wire.to_owned())) {
            None => {
                Err(CodegenError::table(&format!("the schema's `{wire}` ({side:?} side) is missing from meta.json")))
            }
            Some(named) if named != rust => Err(CodegenError::table(&format!(
                "meta.json names the {side:?} side's `{wire}` `{named}`, but the schema's method name gives `{rust}`"
            ))),
            Some(_) => Ok(()),
        }
    }

    /// Every meta entry names a schema method of that side (the other direction, every schema
    /// method in meta, is [`Self::check`]).
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
