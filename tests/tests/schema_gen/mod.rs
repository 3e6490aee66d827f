//! What the schema-driven tests share (`properties.rs`, `lossless.rs`): the pinned v1 schema,
//! its method definitions, a seeded PRNG and a generator of valid instances that follows the
//! schema's own keywords (see `properties.rs` for what it covers).

// Each test file uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Map, Value};

/// The seed of every random choice of the schema-driven tests.
pub const SEED: u64 = 0x0AC9_5EED_2026_0007;

/// Below this depth optional properties, array items and map entries are generated; beyond
/// it only what is required (keeps instances small and recursion finite).
pub const MAX_DEPTH: usize = 14;

// ---- a seeded PRNG ----------------------------------------------------------------------------

/// splitmix64: tiny, fast, and good enough to drive choices.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn percent(&mut self, p: u64) -> bool {
        self.next_u64() % 100 < p
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

// ---- the schema -------------------------------------------------------------------------------

pub struct Schema {
    pub defs: Map<String, Value>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Request,
    Response,
    Notification,
}

/// One `x-method` definition: the params of a request or notification, or a result.
#[derive(Debug)]
pub struct Method {
    pub def: String,
    pub method: String,
    pub side: String,
    pub kind: Kind,
}

impl Schema {
    pub fn load() -> Self {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/acp-schema/next/npm-sdk-2.4.0/v1/schema.json");
        let text = std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let schema: Value = serde_json::from_slice(&text).expect("the schema is JSON");
        Schema { defs: schema["$defs"].as_object().cloned().expect("$defs") }
    }

    pub fn def(&self, reference: &Value) -> (&str, &Value) {
        let name = reference.as_str().and_then(|r| r.strip_prefix("#/$defs/")).expect("local $ref");
        let (name, def) = self.defs.get_key_value(name).unwrap_or_else(|| panic!("no definition {name}"));
        (name.as_str(), def)
    }

    /// Every method definition, from `x-method` / `x-side`; the kind from the name's suffix.
    pub fn methods(&self) -> Vec<Method> {
        let mut out = Vec::new();
        for (name, def) in &self.defs {
            let (Some(method), Some(side)) = (def["x-method"].as_str(), def["x-side"].as_str()) else { continue };
            let kind = if name.ends_with("Request") {
                Kind::Request
            } else if name.ends_with("Response") {
                Kind::Response
            } else if name.ends_with("Notification") {
                Kind::Notification
            } else {
                panic!("{name}: x-method on a definition that is no Request, Response or Notification");
            };
            out.push(Method { def: name.clone(), method: method.into(), side: side.into(), kind });
        }
        out
    }

    /// The definitions reachable from `root` the way the generator walks the schema (catch-all
    /// alternatives that use `not` excluded).
    pub fn reachable(&self, root: &Value, out: &mut BTreeSet<String>) {
        let Some(s) = root.as_object() else { return };
        if let Some(r) = s.get("$ref") {
            let (name, def) = self.def(r);
            if out.insert(name.to_owned()) {
                self.reachable(def, out);
            }
        }
        for p in s.get("properties").and_then(Value::as_object).into_iter().flat_map(|p| p.values()) {
            self.reachable(p, out);
        }
        for key in ["additionalProperties", "items"] {
            if let Some(sub) = s.get(key) {
                self.reachable(sub, out);
            }
        }
        for a in s.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            self.reachable(a, out);
        }
        for a in alternatives(root) {
            self.reachable(a, out);
        }
    }
}

/// The `anyOf` / `oneOf` alternatives of a schema, without the catch-alls that use `not`.
pub fn alternatives(s: &Value) -> Vec<&Value> {
    ["anyOf", "oneOf"]
        .iter()
        .filter_map(|k| s.get(*k).and_then(Value::as_array))
        .flatten()
        .filter(|a| a.get("not").is_none())
        .collect()
}

pub fn types_of(s: &Value) -> Vec<&str> {
    match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    }
}

pub fn flag(s: &Value, name: &str) -> bool {
    s.get(name).and_then(Value::as_bool) == Some(true)
}

/// The range of an integer schema: its `format`, narrowed by `minimum` / `maximum`.
pub fn integer_range(s: &Value) -> (i128, i128) {
    let (mut lo, mut hi): (i128, i128) = match s.get("format").and_then(Value::as_str) {
        Some("int8") => (i8::MIN.into(), i8::MAX.into()),
        Some("uint8") => (0, u8::MAX.into()),
        Some("int16") => (i16::MIN.into(), i16::MAX.into()),
        Some("uint16") => (0, u16::MAX.into()),
        Some("int32") => (i32::MIN.into(), i32::MAX.into()),
        Some("uint32") => (0, u32::MAX.into()),
        Some("uint64") => (0, u64::MAX.into()),
        _ => (i64::MIN.into(), i64::MAX.into()),
    };
    if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
        lo = lo.max(min.ceil() as i128);
    }
    if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
        hi = hi.min(max.floor() as i128);
    }
    (lo, hi)
}

pub fn int_value(v: i128) -> Value {
    if v > i64::MAX as i128 { Value::from(v as u64) } else { Value::from(v as i64) }
}

// ---- the generator -------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub enum Seg {
    Key(String),
    Index(usize),
}

pub struct Gen<'a> {
    pub schema: &'a Schema,
    pub rng: Rng,
    /// Definitions gone through, over every instance.
    pub covered: BTreeSet<String>,
    /// The paths of the required properties of the last instance.
    pub required: Vec<Vec<Seg>>,
}

pub const ALPHABET: &[&str] =
    &["a", "b", "Z", "0", "_", "/", " ", "é", "ß", "😀", "\"", "\\", "\n", "\t", "\u{0}", "\u{7f}", "{", "]"];

impl<'a> Gen<'a> {
    pub fn new(schema: &'a Schema, seed: u64) -> Self {
        Gen { schema, rng: Rng(seed), covered: BTreeSet::new(), required: Vec::new() }
    }

    pub fn instance(&mut self, def: &str) -> Value {
        self.required.clear();
        self.covered.insert(def.to_owned());
        self.generate(&self.schema.defs[def], &mut Vec::new(), 0)
    }

    pub fn string(&mut self) -> String {
        let n = self.rng.below(9);
        (0..n).map(|_| *self.rng.pick(ALPHABET)).collect()
    }

    /// Any JSON value (free-form `_meta` content, `rawInput`, ...). Numbers are integers or
    /// dyadic fractions, which every float parser reads back exactly.
    pub fn any_json(&mut self, depth: usize) -> Value {
        let deep = depth > MAX_DEPTH;
        match self.rng.below(if deep { 5 } else { 7 }) {
            0 => Value::Null,
            1 => Value::Bool(self.rng.percent(50)),
            2 => Value::from(self.rng.next_u64() as i64 >> self.rng.below(64)),
            3 => Value::from((self.rng.next_u64() as i32) as f64 / 16.0),
            4 => Value::String(self.string()),
            5 => Value::Array((0..self.rng.below(3)).map(|_| self.any_json(depth + 1)).collect()),
            _ => Value::Object((0..self.rng.below(3)).map(|_| (self.string(), self.any_json(depth + 1))).collect()),
        }
    }

    pub fn integer(&mut self, s: &Value) -> Value {
        let (lo, hi) = integer_range(s);
        if self.rng.percent(30) {
            let edges: Vec<i128> =
                [lo, hi, 0, 1, lo + 1, hi - 1].into_iter().filter(|v| (lo..=hi).contains(v)).collect();
            return int_value(*self.rng.pick(&edges));
        }
        if self.rng.percent(50) {
            let near_zero = (self.rng.next_u64() % 2001) as i128 - 1000;
            return int_value(near_zero.clamp(lo, hi));
        }
        let span = (hi - lo + 1) as u128;
        int_value(lo + (self.rng.next_u64() as u128 % span) as i128)
    }

    pub fn merge(into: Option<Value>, v: Value) -> Option<Value> {
        match (into, v) {
            (None, v) => Some(v),
            (Some(Value::Object(mut a)), Value::Object(b)) => {
                a.extend(b);
                Some(Value::Object(a))
            }
            (Some(a), b) => panic!("cannot merge {a} with {b}"),
        }
    }

    pub fn generate(&mut self, s: &Value, path: &mut Vec<Seg>, depth: usize) -> Value {
        let deep = depth > MAX_DEPTH;
        let s = match s {
            Value::Bool(true) => return self.any_json(depth),
            Value::Object(_) => s,
            other => panic!("cannot generate from {other}"),
        };
        if let Some(r) = s.get("$ref") {
            let (name, def) = self.schema.def(r);
            self.covered.insert(name.to_owned());
            return self.generate(def, path, depth + 1);
        }
        if let Some(c) = s.get("const") {
            return c.clone();
        }
        if let Some(Value::Array(values)) = s.get("enum") {
            return self.rng.pick(values).clone();
        }
        let types = types_of(s);
        if types.contains(&"null") && (types.len() == 1 || self.rng.percent(if deep { 100 } else { 15 })) {
            return Value::Null;
        }
        let alts = alternatives(s);
        let objectish = types.contains(&"object") || s.get("properties").is_some();
        let mut out = objectish.then(|| self.object(s, path, depth));
        for a in s.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            let v = self.generate(a, path, depth);
            out = Self::merge(out, v);
        }
        if !alts.is_empty() {
            let null = alts.iter().position(|a| types_of(a) == ["null"]);
            let alt = match null {
                Some(i) if deep || self.rng.percent(15) => alts[i],
                Some(i) => {
                    let others: Vec<&Value> =
                        alts.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, a)| *a).collect();
                    if others.is_empty() { alts[i] } else { *self.rng.pick(&others) }
                }
                None => *self.rng.pick(&alts),
            };
            let v = self.generate(alt, path, depth);
            out = Self::merge(out, v);
        }
        if let Some(v) = out {
            return v;
        }
        let concrete: Vec<&str> = types.iter().copied().filter(|t| *t != "null").collect();
        if concrete.is_empty() {
            return self.any_json(depth);
        }
        match *self.rng.pick(&concrete) {
            "string" => Value::String(self.string()),
            "boolean" => Value::Bool(self.rng.percent(50)),
            "integer" => self.integer(s),
            "number" => js_number((self.rng.next_u64() as i32) as f64 / 16.0),
            "array" => {
                let items = s.get("items").expect("array schema with items");
                let n = if deep { 0 } else { self.rng.below(4) };
                Value::Array(
                    (0..n)
                        .map(|i| {
                            path.push(Seg::Index(i));
                            let v = self.generate(items, path, depth + 1);
                            path.pop();
                            v
                        })
                        .collect(),
                )
            }
            other => panic!("unexpected type {other} in {s}"),
        }
    }

    /// An object's own `properties` (required ones always, optional ones at random) and, for a
    /// map, a few entries of `additionalProperties`.
    pub fn object(&mut self, s: &Value, path: &mut Vec<Seg>, depth: usize) -> Value {
        let deep = depth > MAX_DEPTH;
        let required: BTreeSet<&str> =
            s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        let mut out = Map::new();
        let props = s.get("properties").and_then(Value::as_object);
        for (k, ps) in props.into_iter().flatten() {
            let is_required = required.contains(k.as_str());
            if !is_required && (deep || self.rng.percent(50)) {
                continue;
            }
            path.push(Seg::Key(k.clone()));
            let v = self.generate(ps, path, depth + 1);
            if is_required {
                self.required.push(path.clone());
            }
            path.pop();
            out.insert(k.clone(), v);
        }
        // Extra entries only for maps: a struct with declared properties drops unknown ones.
        if props.is_none_or(|p| p.is_empty())
            && let Some(extra) = s.get("additionalProperties").filter(|e| **e != Value::Bool(false))
        {
            let n = if deep { 0 } else { self.rng.below(4) };
            for _ in 0..n {
                let k = self.string();
                path.push(Seg::Key(k.clone()));
                let v = self.generate(extra, path, depth + 1);
                path.pop();
                out.insert(k, v);
            }
        }
        Value::Object(out)
    }
}

pub fn get_mut<'v>(v: &'v mut Value, path: &[Seg]) -> &'v mut Value {
    path.iter().fold(v, |v, seg| match seg {
        Seg::Key(k) => &mut v[k.as_str()],
        Seg::Index(i) => &mut v[*i],
    })
}

pub fn show(path: &[Seg]) -> String {
    path.iter()
        .map(|s| match s {
            Seg::Key(k) => format!("/{k}"),
            Seg::Index(i) => format!("/{i}"),
        })
        .collect()
}

/// A typed `number` as a JavaScript peer writes it (`JSON.stringify`): integral values without
/// a fraction (`1`, not `1.0`), which is also how the generated types write them back.
pub fn js_number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() <= 9_007_199_254_740_992.0 { Value::from(x as i64) } else { Value::from(x) }
}

pub fn seed_for(m: &Method, salt: u64) -> u64 {
    m.def.bytes().fold(SEED ^ salt, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01B3))
}
