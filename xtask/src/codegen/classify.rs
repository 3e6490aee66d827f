//! Classification: each `$defs` entry of the schema becomes one IR [`Item`].
//!
//! Normalisation happens on the way in: `$ref` becomes a type name, a single-element `allOf`
//! is unwrapped into its target, and `type: [X, "null"]` / `anyOf: [X, {type: null}]` become
//! `X` plus a `nullable` flag. Inline constructs that need a name of their own (a union next
//! to `properties`, an inline object) become extra items with a name derived from their
//! parent. A definition the generator cannot represent becomes an [`ItemKind::Untyped`] item
//! (raw JSON) with the reason, which the run reports and `--strict` refuses; nothing here
//! panics on unexpected input.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::ir::*;
use super::naming::{pascal, pascal_words, snake};
use super::{CodegenError, Result};

/// The envelope definitions (`AgentRequest`, ...): generated from the method table, not from
/// their schema shape, so that decoding is directed by the method name.
pub fn is_envelope(def: &Value) -> bool {
    def.get("x-docs-ignore").and_then(Value::as_bool) == Some(true)
}

/// Turns the definitions of one schema into IR items.
pub(crate) struct Classifier<'s> {
    defs: &'s Map<String, Value>,
    /// Items synthesised for inline constructs, by name (deduplicated by shape).
    extra: BTreeMap<String, Item>,
}

impl<'s> Classifier<'s> {
    pub fn new(defs: &'s Map<String, Value>) -> Self {
        Classifier { defs, extra: BTreeMap::new() }
    }

    /// Classifies every non-envelope definition, in schema order, followed by the
    /// synthesised items. A definition with a construct no rule covers is emitted untyped, and
    /// the items synthesised on the way to that failure are dropped with it.
    pub fn classify_all(mut self) -> Result<Vec<Item>> {
        let mut items = Vec::new();
        for (name, def) in self.defs {
            if is_envelope(def) {
                continue;
            }
            if let Some(reason) = unknown_keyword(def, "") {
                items.push(untyped(name, def, reason));
                continue;
            }
            let extra = self.extra.clone();
            match self.classify(name, def) {
                Ok(item) => items.push(item),
                Err(CodegenError::Unsupported { construct, .. }) => {
                    self.extra = extra;
                    items.push(untyped(name, def, construct));
                }
                Err(other) => return Err(other),
            }
        }
        items.extend(self.extra.into_values());
        Ok(items)
    }

    fn classify(&mut self, name: &str, def: &Value) -> Result<Item> {
        let err = |construct: &str| CodegenError::unsupported(name, construct);
        let obj = def.as_object().ok_or_else(|| err("a definition that is not an object"))?;
        let doc = doc_of(def);
        let kind = if let Some(values) = obj.get("enum") {
            ItemKind::StringEnum(string_enum_values(values).ok_or_else(|| err("a non-string `enum`"))?)
        } else if obj.contains_key("properties") || type_is(def, "object") {
            ItemKind::Struct(self.structure(name, def)?)
        } else if let Some(variants) = union_variants(def) {
            self.union(name, def, variants)?
        } else if let Some(target) = alias_target(obj) {
            ItemKind::Alias(self.ref_name(name, target)?)
        } else if let Some(prim) = prim_of(def) {
            ItemKind::Newtype(Ty::Prim(prim.map_err(|e| err(&e))?))
        } else if is_any(def) {
            ItemKind::Any
        } else {
            return Err(err(&format!("a schema with keywords {:?}", obj.keys().collect::<Vec<_>>())));
        };
        Ok(Item { name: name.to_owned(), doc, gate: Gate::Stable, kind })
    }

    /// An object: its properties, and a flattened union when `oneOf`/`anyOf` stands next to them.
    fn structure(&mut self, name: &str, def: &Value) -> Result<Struct> {
        let required: Vec<&str> = def
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut fields = Vec::new();
        if let Some(props) = def.get("properties").and_then(Value::as_object) {
            let doc = doc_of(def);
            for (wire, prop) in props {
                let mut field = self.field(name, wire, prop, required.contains(&wire.as_str()))?;
                field.null_clears = field.nullable && null_clears(wire, field.doc.as_deref(), doc.as_deref());
                fields.push(field);
            }
        }
        let flatten = match union_variants(def) {
            Some(variants) => {
                let union_name = self.flattened_union_name(name, def, variants);
                let kind = self.union(&union_name, def, variants)?;
                // Named after what varies: the tag (`mode`, `action`; `type` reads as `kind`),
                // else the last word of the union's name (`ElicitationScope` → `scope`).
                let field = match &kind {
                    ItemKind::Tagged(t) if t.tag == "type" => "kind".to_owned(),
                    ItemKind::Tagged(t) => snake(&t.tag),
                    _ => pascal_words(&union_name).last().map(|w| snake(w)).unwrap_or_default(),
                };
                let what = match &kind {
                    ItemKind::Tagged(t) => format!("`{}`", t.tag),
                    _ => "the kind of object".to_owned(),
                };
                let mut doc = format!(
                    "What varies with {what}: a [`{union_name}`], whose members are written next to\n\
                     the others (flattened)."
                );
                // The object lists the tag among its own members (`IdleStateUpdate`'s
                // `stopReason`): the member is the union's tag, so the union takes its place,
                // and where the member is optional so is the union. Absent, `null`, or a value
                // no variant reads (a malformed one) then all decode as `None`.
                let mut optional = false;
                if let ItemKind::Tagged(t) = &kind
                    && let Some(at) = fields.iter().position(|f| f.wire == t.tag)
                {
                    let member = fields.remove(at);
                    optional = !member.required;
                    if let Some(text) = member.doc {
                        doc = format!("{text}\n\n{doc}");
                    }
                    if optional {
                        doc.push_str(" `None` when the member is absent, `null`, or not one of the variants' shapes.");
                    }
                }
                self.add_extra(Item {
                    name: union_name.clone(),
                    doc: Some(format!("The part of [`{name}`] that varies with its kind.")),
                    gate: Gate::Stable,
                    kind,
                })?;
                Some(Flatten {
                    field: if field.is_empty() { "kind".into() } else { field },
                    ty: union_name,
                    doc,
                    optional,
                })
            }
            None => None,
        };
        Ok(Struct { fields, flatten })
    }

    fn field(&mut self, parent: &str, wire: &str, prop: &Value, required: bool) -> Result<Field> {
        let (ty, nullable) = self.ty(parent, wire, prop)?;
        let holds_null = match &ty {
            Ty::Value => true,
            Ty::Named(n) => self.defs.get(n).is_some_and(is_any),
            _ => false,
        };
        Ok(Field {
            wire: wire.to_owned(),
            doc: doc_of(prop),
            ty,
            required,
            nullable,
            holds_null,
            null_clears: false,
            default_on_error: flag(prop, "x-deserialize-default-on-error"),
            skip_invalid_items: flag(prop, "x-deserialize-skip-invalid-items"),
            default_on_null: flag(prop, "x-deserialize-default-on-null"),
            gate: Gate::Stable,
        })
    }

    /// The type of a property (or array item) schema, and whether it admits `null`.
    fn ty(&mut self, parent: &str, field: &str, node: &Value) -> Result<(Ty, bool)> {
        let err = |construct: &str| CodegenError::unsupported(parent, &format!("property `{field}`: {construct}"));
        let node = match node {
            Value::Bool(true) => return Ok((Ty::Value, false)),
            Value::Object(o) => o,
            _ => return Err(err("a schema that is neither an object nor `true`")),
        };
        if let Some(target) = node.get("$ref").and_then(Value::as_str) {
            return Ok((Ty::Named(self.ref_name(parent, target)?), false));
        }
        if let Some(inner) = single(node.get("allOf")) {
            return self.ty(parent, field, inner);
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(vs)) = node.get(key) {
                let non_null: Vec<&Value> = vs.iter().filter(|v| !type_is(v, "null")).collect();
                if non_null.len() == 1 && vs.len() == 2 {
                    let (ty, _) = self.ty(parent, field, non_null[0])?;
                    return Ok((ty, true));
                }
                return Err(err(&format!("an inline `{key}` of {} variants", vs.len())));
            }
        }
        let (types, nullable) = match node.get("type") {
            None => return Ok((Ty::Value, false)),
            Some(Value::String(t)) => (vec![t.as_str()], false),
            Some(Value::Array(ts)) => {
                let ts: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
                let nullable = ts.contains(&"null");
                (ts.into_iter().filter(|t| *t != "null").collect(), nullable)
            }
            Some(_) => return Err(err("a `type` that is neither a string nor an array")),
        };
        let [t] = types[..] else {
            return Err(err(&format!("several types {types:?}")));
        };
        let ty = match t {
            "array" => {
                let items = node.get("items").ok_or_else(|| err("an array without `items`"))?;
                let (item, _) = self.ty(parent, field, items)?;
                Ty::Vec(Box::new(item))
            }
            "object" if node.contains_key("properties") => {
                let name = format!("{}{}", strip_suffixes(parent), pascal(field));
                let def = Value::Object(node.clone());
                let item = Item {
                    name: name.clone(),
                    doc: doc_of(&def),
                    gate: Gate::Stable,
                    kind: ItemKind::Struct(self.structure(&name, &def)?),
                };
                self.add_extra(item)?;
                Ty::Named(name)
            }
            "object" => match node.get("additionalProperties") {
                Some(v @ Value::Object(_)) => Ty::Map(Box::new(self.ty(parent, field, v)?.0)),
                _ => Ty::Object,
            },
            _ => Ty::Prim(prim_from(t, node.get("format").and_then(Value::as_str)).map_err(|e| err(&e))?),
        };
        Ok((ty, nullable))
    }

    fn ref_name(&self, parent: &str, target: &str) -> Result<String> {
        let name = target
            .strip_prefix("#/$defs/")
            .or_else(|| target.strip_prefix("#/definitions/"))
            .ok_or_else(|| CodegenError::unsupported(parent, &format!("a non-local `$ref` {target}")))?;
        if !self.defs.contains_key(name) {
            return Err(CodegenError::unsupported(parent, &format!("a `$ref` to missing `{name}`")));
        }
        Ok(name.to_owned())
    }

    /// A union: `def` holds its `oneOf`/`anyOf` (`variants`) and any `discriminator`.
    fn union(&mut self, name: &str, def: &Value, variants: &[Value]) -> Result<ItemKind> {
        let err = |construct: &str| CodegenError::unsupported(name, construct);
        // String constants (with an optional open `{type: string}` catch-all).
        if variants.iter().all(|v| type_is(v, "string") && v.get("properties").is_none()) {
            let values = variants
                .iter()
                .filter_map(|v| {
                    let wire = v.get("const").and_then(Value::as_str)?;
                    Some(EnumValue { wire: wire.to_owned(), doc: doc_of(v), gate: Gate::Stable })
                })
                .collect();
            return Ok(ItemKind::StringEnum(values));
        }
        // Integer constants (`ErrorCode`).
        if variants.iter().all(|v| type_is(v, "integer")) {
            let repr = prim_of(&variants[0]).unwrap_or(Ok(Prim::I64)).map_err(|e| err(&e))?;
            let (lo, hi) = repr.int_range().ok_or_else(|| err("integer constants of a non-integer type"))?;
            let mut consts = Vec::new();
            for v in variants {
                let Some(constant) = v.get("const") else { continue };
                let title =
                    v.get("title").and_then(Value::as_str).ok_or_else(|| err("an untitled integer constant"))?;
                let value = constant.as_i64().filter(|&n| (lo..=hi).contains(&i128::from(n))).ok_or_else(|| {
                    err(&format!("integer constant `{title}` = {constant}, out of the range of its type ({lo}..={hi})"))
                })?;
                let name = screaming(title);
                if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
                    return Err(err(&format!("integer constant titled `{title}`, which makes no Rust name")));
                }
                consts.push(IntConst { name, value, doc: doc_of(v) });
            }
            return Ok(ItemKind::IntConsts { repr, consts });
        }
        if let Some(tag) = discriminator(def, variants) {
            if !variants.iter().any(|v| tag_const(v, &tag).is_some()) {
                return Err(err(&format!(
                    "`discriminator.propertyName` `{tag}`, which no variant pins with a `const` string"
                )));
            }
            return self.tagged(name, &tag, variants).map(ItemKind::Tagged);
        }
        let mut out = Vec::new();
        for (i, v) in variants.iter().enumerate() {
            // An inline alternative becomes a struct named after the union and its title.
            let field = v.get("title").and_then(Value::as_str).map_or_else(|| format!("variant {i}"), str::to_owned);
            let (ty, _) = self.ty(name, &field, v)?;
            let variant_name = match (v.get("title").and_then(Value::as_str), &ty) {
                (Some(title), _) => pascal(title),
                (None, Ty::Named(n)) => n.clone(),
                (None, Ty::Prim(Prim::Null)) => "Null".into(),
                _ => return Err(err(&format!("an untitled inline variant {i}"))),
            };
            out.push(UntaggedVariant { name: variant_name, doc: doc_of(v), ty });
        }
        Ok(ItemKind::Untagged(out))
    }

    fn tagged(&mut self, name: &str, tag: &str, variants: &[Value]) -> Result<Tagged> {
        let err = |construct: &str| CodegenError::unsupported(name, construct);
        let mut out = Tagged { tag: tag.to_owned(), variants: Vec::new(), untagged_default: None };
        for v in variants {
            let tag_schema = v.get("properties").and_then(|p| p.get(tag));
            let constant = tag_const(v, tag);
            match (constant, tag_schema) {
                (Some(wire), _) => out.variants.push(TaggedVariant {
                    wire: wire.to_owned(),
                    doc: doc_of(v),
                    payload: self.payload(name, tag, v)?,
                    gate: Gate::Stable,
                }),
                // `{title: "other", properties: {tag: {type: string}}, not: ...}`: the open
                // catch-all, which every generated union has anyway.
                (None, Some(_)) => {}
                (None, None) => {
                    if out.untagged_default.is_some() {
                        return Err(err("two variants without the tag property"));
                    }
                    let payload = self.payload(name, tag, v)?;
                    let title = v.get("title").and_then(Value::as_str);
                    let variant_name = match (title, &payload) {
                        (Some(t), _) => pascal(t),
                        (None, Payload::Type(n)) => n.clone(),
                        _ => return Err(err("an untitled variant without the tag property")),
                    };
                    let wire = title.map(str::to_owned);
                    let doc = doc_of(v);
                    let takes_unknown_tags = takes_unknown_tags(name, tag, doc.as_deref())?;
                    out.untagged_default =
                        Some(DefaultVariant { name: variant_name, wire, doc, payload, takes_unknown_tags });
                }
            }
        }
        // The tagless variant's title stands for it as a tag value too, unless a tagged
        // variant uses that value.
        if let Some(d) = &mut out.untagged_default
            && d.wire.as_ref().is_some_and(|w| out.variants.iter().any(|v| &v.wire == w))
        {
            d.wire = None;
        }
        Ok(out)
    }

    /// What a tagged variant carries next to its tag.
    fn payload(&mut self, name: &str, tag: &str, v: &Value) -> Result<Payload> {
        if let Some(inner) = single(v.get("allOf")) {
            return match self.ty(name, tag, inner)? {
                (Ty::Named(n), _) => Ok(Payload::Type(n)),
                _ => Err(CodegenError::unsupported(name, "a variant whose `allOf` is not a `$ref`")),
            };
        }
        let others: Vec<(&String, &Value)> = v
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.iter().filter(|(k, _)| *k != tag).collect())
            .unwrap_or_default();
        let required =
            |wire: &str| v.get("required").and_then(Value::as_array).is_some_and(|r| r.iter().any(|x| x == wire));
        if let [(wire, schema)] = others[..] {
            // A single property that is always there and never null is the variant's value;
            // one that may be absent or null (or is read leniently) is a struct's field below,
            // where absent, `null` and a value stay apart.
            let (ty, nullable) = self.ty(name, wire, schema)?;
            let lenient =
                flag(schema, "x-deserialize-default-on-error") || flag(schema, "x-deserialize-skip-invalid-items");
            if required(wire) && !nullable && !lenient {
                return Ok(Payload::Property { wire: wire.clone(), ty });
            }
        }
        match others[..] {
            [] => Ok(Payload::Unit),
            _ => {
                // An inline object (early schemas): a struct of its own, named after the union
                // and the variant (`ContentBlock` + `text` → `ContentBlockText`).
                let variant =
                    tag_const(v, tag).or_else(|| v.get("title").and_then(Value::as_str)).ok_or_else(|| {
                        CodegenError::unsupported(
                            name,
                            "an unnamed inline variant with properties that are not one required value",
                        )
                    })?;
                let struct_name = format!("{name}{}", pascal(variant));
                let mut def = v.clone();
                if let Some(obj) = def.as_object_mut() {
                    if let Some(Value::Object(props)) = obj.get_mut("properties") {
                        props.remove(tag);
                    }
                    if let Some(Value::Array(req)) = obj.get_mut("required") {
                        req.retain(|r| r.as_str() != Some(tag));
                    }
                }
                let item = Item {
                    name: struct_name.clone(),
                    doc: doc_of(v),
                    gate: Gate::Stable,
                    kind: ItemKind::Struct(self.structure(&struct_name, &def)?),
                };
                self.add_extra(item)?;
                Ok(Payload::Type(struct_name))
            }
        }
    }

    /// A flattened union is named after what varies: `{Parent}{Tag}` for a tagged union
    /// (`SessionConfigOptionType`), the shared part of the variants' names otherwise
    /// (`ElicitationSessionScope` | `ElicitationRequestScope` → `ElicitationScope`).
    fn flattened_union_name(&self, parent: &str, def: &Value, variants: &[Value]) -> String {
        let base = strip_suffixes(parent);
        if let Some(tag) = discriminator(def, variants) {
            return format!("{base}{}", pascal(&tag));
        }
        let refs: Vec<&str> = variants
            .iter()
            .filter_map(|v| single(v.get("allOf")).and_then(|r| r.get("$ref")).and_then(Value::as_str))
            .map(|r| r.rsplit('/').next().unwrap_or(r))
            .collect();
        if refs.len() == variants.len() && refs.len() > 1 {
            let words: Vec<Vec<String>> = refs.iter().map(|r| pascal_words(r)).collect();
            let prefix = common_len(words.iter().map(|w| w.iter()));
            let suffix = common_len(words.iter().map(|w| w.iter().rev()));
            let first = &words[0];
            if prefix + suffix > 0 && prefix + suffix < first.len() {
                let mut name: String = first[..prefix].concat();
                name.push_str(&first[first.len() - suffix..].concat());
                return name;
            }
        }
        format!("{base}Kind")
    }

    /// Adds a synthesised item; the same name twice must mean the same shape.
    fn add_extra(&mut self, item: Item) -> Result<()> {
        if self.defs.contains_key(&item.name) {
            return Err(CodegenError::unsupported(&item.name, "a derived name that collides with a definition"));
        }
        match self.extra.get(&item.name) {
            Some(existing) if existing.kind != item.kind => {
                Err(CodegenError::unsupported(&item.name, "two different inline constructs deriving the same name"))
            }
            Some(_) => Ok(()),
            None => {
                self.extra.insert(item.name.clone(), item);
                Ok(())
            }
        }
    }
}

/// The keywords whose meaning the generator knows: those it types by, and those that only
/// annotate or validate a value without changing its Rust shape (`minimum`, `pattern`: the
/// types decode what the schema allows and more, never less). Any other keyword in a definition,
/// at any depth, may change what the values are, so the definition is emitted untyped and
/// reported rather than typed by a guess.
const KNOWN_KEYWORDS: &[&str] = &[
    // Typed by.
    "type",
    "$ref",
    "properties",
    "required",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "const",
    "enum",
    "items",
    "additionalProperties",
    "unevaluatedProperties",
    "format",
    "discriminator",
    "x-method",
    "x-side",
    "x-docs-ignore",
    "x-deserialize-default-on-error",
    "x-deserialize-skip-invalid-items",
    "x-deserialize-default-on-null",
    // Annotations and validation only.
    "description",
    "title",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$comment",
    "$schema",
    "$id",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minLength",
    "maxLength",
    "pattern",
    "minProperties",
    "maxProperties",
    "contentEncoding",
    "contentMediaType",
];

/// The first keyword of `node` (a schema, at path `at` in its definition) the generator does not
/// know, as a reason for the report.
fn unknown_keyword(node: &Value, at: &str) -> Option<String> {
    let obj = node.as_object()?;
    let here = |key: &str| if at.is_empty() { key.to_owned() } else { format!("{at}.{key}") };
    for (key, value) in obj {
        if !KNOWN_KEYWORDS.contains(&key.as_str()) {
            let place = if at.is_empty() { String::new() } else { format!(" (at `{at}`)") };
            return Some(format!("the keyword `{key}`{place}, which it has no rule for"));
        }
        // Descend into the keywords whose values are schemas; the others hold plain values.
        let found = match (key.as_str(), value) {
            ("properties", Value::Object(props)) => {
                props.iter().find_map(|(name, schema)| unknown_keyword(schema, &here(&format!("properties.{name}"))))
            }
            ("allOf" | "anyOf" | "oneOf", Value::Array(schemas)) => schemas
                .iter()
                .enumerate()
                .find_map(|(i, schema)| unknown_keyword(schema, &here(&format!("{key}[{i}]")))),
            ("items" | "additionalProperties" | "unevaluatedProperties" | "not", schema) => {
                unknown_keyword(schema, &here(key))
            }
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// The item of a definition no rule covers: any JSON value, with the reason.
pub(crate) fn untyped(name: &str, def: &Value, reason: String) -> Item {
    Item { name: name.to_owned(), doc: doc_of(def), gate: Gate::Stable, kind: ItemKind::Untyped { reason } }
}

/// The definition a definition is another name for: `allOf` of exactly one `$ref`, with
/// nothing but annotations beside it (`InitializeProxyRequest`).
fn alias_target(obj: &Map<String, Value>) -> Option<&str> {
    let target = single(obj.get("allOf"))?.as_object()?;
    if target.len() != 1 || !obj.keys().all(|k| k == "allOf" || is_annotation(k)) {
        return None;
    }
    target.get("$ref")?.as_str()
}

/// Whether a tagless variant's description says that unknown tag values decode into it
/// ("Unknown `type` values with string payloads also gracefully deserialize into this
/// variant."). The schema's structure allows it for every tagless variant (none constrains the
/// tag), so the description is what tells the variants that want it from the ones that are
/// only the default for an absent tag (`AuthMethod` agent); a description that speaks of
/// unknown tag values in other words is an error rather than a guess.
fn takes_unknown_tags(union: &str, tag: &str, doc: Option<&str>) -> Result<bool> {
    let Some(doc) = doc else { return Ok(false) };
    let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    if !doc.contains(&format!("Unknown `{tag}` values")) {
        return Ok(false);
    }
    if doc.contains("deserialize into this variant") {
        return Ok(true);
    }
    Err(CodegenError::unsupported(
        union,
        &format!(
            "a tagless variant whose description speaks of unknown `{tag}` values without saying they decode into it"
        ),
    ))
}

/// Whether the schema says a present `null` clears property `wire` (rather than meaning the
/// same as absent): the property's own description says so ("`null` is an explicit clear
/// signal", "`null` clears it"), or the object's description names it among the properties
/// with patch semantics ("`summary`, `error`, and `_meta` have patch semantics").
fn null_clears(wire: &str, doc: Option<&str>, parent_doc: Option<&str>) -> bool {
    let flat = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let own = doc.map(flat).unwrap_or_default();
    if own.contains("`null` is an explicit clear signal") || own.contains("`null` clears") {
        return true;
    }
    let parent = parent_doc.map(flat).unwrap_or_default();
    let named = format!("`{wire}`");
    parent
        .split(". ")
        .any(|sentence| sentence.split_once("patch semantics").is_some_and(|(subject, _)| subject.contains(&named)))
}

fn common_len<'a, I: Iterator<Item = &'a String>>(mut seqs: impl Iterator<Item = I>) -> usize {
    let Some(first) = seqs.next() else { return 0 };
    let first: Vec<&String> = first.collect();
    let mut len = first.len();
    for s in seqs {
        len = len.min(s.zip(first.iter()).take_while(|(a, b)| a == *b).count());
    }
    len
}

/// `SetSessionConfigOptionRequest` → `SetSessionConfigOption`: derived names read better
/// without the message suffix.
fn strip_suffixes(name: &str) -> &str {
    ["Request", "Response", "Notification"]
        .iter()
        .find_map(|s| name.strip_suffix(s).filter(|b| !b.is_empty()))
        .unwrap_or(name)
}

/// The `oneOf`/`anyOf` variants of a definition, if it is a union.
fn union_variants(def: &Value) -> Option<&[Value]> {
    def.get("oneOf").or_else(|| def.get("anyOf")).and_then(Value::as_array).map(Vec::as_slice)
}

/// The `const` string a variant pins `tag` to.
fn tag_const<'v>(v: &'v Value, tag: &str) -> Option<&'v str> {
    v.get("properties")?.get(tag)?.get("const")?.as_str()
}

/// The property that tells the variants apart, if the union is tagged: the schema's
/// `discriminator.propertyName` when it gives one, else the property every tagged variant
/// pins with a `const` string (the first, in the schema's order, if several).
fn discriminator(def: &Value, variants: &[Value]) -> Option<String> {
    if let Some(name) = def.get("discriminator").and_then(|d| d.get("propertyName")).and_then(Value::as_str) {
        return Some(name.to_owned());
    }
    let const_props = |v: &Value| -> Vec<String> {
        v.get("properties")
            .and_then(Value::as_object)
            .map(|p| {
                p.iter()
                    .filter(|(_, s)| s.get("const").and_then(Value::as_str).is_some())
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut candidates: Option<Vec<String>> = None;
    for v in variants {
        let props = const_props(v);
        if props.is_empty() {
            continue;
        }
        candidates = Some(match candidates {
            None => props,
            Some(c) => c.into_iter().filter(|k| props.contains(k)).collect(),
        });
    }
    candidates.and_then(|c| c.into_iter().next())
}

fn string_enum_values(values: &Value) -> Option<Vec<EnumValue>> {
    values
        .as_array()?
        .iter()
        .map(|v| Some(EnumValue { wire: v.as_str()?.to_owned(), doc: None, gate: Gate::Stable }))
        .collect()
}

fn single(v: Option<&Value>) -> Option<&Value> {
    match v?.as_array()?.as_slice() {
        [one] => Some(one),
        _ => None,
    }
}

fn type_is(v: &Value, t: &str) -> bool {
    match v.get("type") {
        Some(Value::String(s)) => s == t,
        _ => false,
    }
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool) == Some(true)
}

/// A definition that admits any JSON value (`{}` with annotations only).
fn is_any(def: &Value) -> bool {
    def.as_object().is_some_and(|obj| obj.keys().all(|k| is_annotation(k)))
}

fn is_annotation(key: &str) -> bool {
    matches!(key, "description" | "title" | "x-docs-ignore" | "default" | "examples" | "x-side" | "x-method")
}

/// The trimmed `description` of a schema, when there is a non-empty one.
pub(crate) fn doc_of(v: &Value) -> Option<String> {
    v.get("description").and_then(Value::as_str).map(str::trim).filter(|d| !d.is_empty()).map(str::to_owned)
}

/// The primitive a schema with a single `type` names, or why it cannot be one; `None` when
/// `type` is not a single string.
fn prim_of(v: &Value) -> Option<std::result::Result<Prim, String>> {
    match v.get("type")? {
        Value::String(t) => Some(prim_from(t, v.get("format").and_then(Value::as_str))),
        _ => None,
    }
}

/// A JSON Schema `type` (and `format`) as a Rust primitive. Integer formats are the ones
/// schemars writes (`int8` ... `uint64`, `int` / `uint` for `isize` / `usize`, read as 64
/// bits); no format is `i64`, and an unknown one an error rather than a guess.
fn prim_from(t: &str, format: Option<&str>) -> std::result::Result<Prim, String> {
    Ok(match (t, format) {
        ("string", _) => Prim::String,
        ("boolean", _) => Prim::Bool,
        ("number", _) => Prim::F64,
        ("null", _) => Prim::Null,
        ("integer", Some("int8")) => Prim::I8,
        ("integer", Some("int16")) => Prim::I16,
        ("integer", Some("int32")) => Prim::I32,
        ("integer", None | Some("int64" | "int")) => Prim::I64,
        ("integer", Some("uint8")) => Prim::U8,
        ("integer", Some("uint16")) => Prim::U16,
        ("integer", Some("uint32")) => Prim::U32,
        ("integer", Some("uint64" | "uint")) => Prim::U64,
        ("integer", Some(other)) => return Err(format!("integer format `{other}`")),
        (other, _) => return Err(format!("type `{other}`")),
    })
}

/// `Parse error` → `PARSE_ERROR`.
fn screaming(title: &str) -> String {
    title
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_uppercase)
        .collect::<Vec<_>>()
        .join("_")
}
