//! The intermediate representation between the JSON Schema and the emitted Rust.
//!
//! Classification (`classify.rs`) turns each `$defs` entry into one [`Item`]; the emitter
//! (`emit.rs`) turns items into tokens. Nothing here knows about JSON Schema keywords or
//! about `quote`: the IR is the contract between the two halves.

use std::collections::BTreeSet;

/// One generated type.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The Rust type name (the `$defs` key, or a name derived for an inline construct).
    pub name: String,
    /// The schema's description.
    pub doc: Option<String>,
    /// The features it is compiled under.
    pub gate: Gate,
    /// Its shape.
    pub kind: ItemKind,
}

/// The cargo features an item, field or variant is compiled under.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Gate {
    /// Part of the stable schema: always compiled.
    #[default]
    Stable,
    /// Only in the unstable schema: compiled when any of these features is on.
    Features(BTreeSet<String>),
    /// The stable shape of a definition whose unstable shape differs: compiled when the
    /// feature is off (the unstable shape is gated by it).
    WithoutFeature(String),
}

impl Gate {
    /// Compiled under the one feature `name`.
    pub(crate) fn feature(name: &str) -> Gate {
        Gate::Features(BTreeSet::from([name.to_owned()]))
    }

    /// Whether it is always compiled.
    pub fn is_stable(&self) -> bool {
        matches!(self, Gate::Stable)
    }

    /// The gate under which both `self` and `other` users are served.
    pub fn union(&self, other: &Gate) -> Gate {
        match (self, other) {
            (Gate::Stable, _) | (_, Gate::Stable) => Gate::Stable,
            (Gate::Features(a), Gate::Features(b)) => Gate::Features(a.union(b).cloned().collect()),
            (a, b) if a == b => a.clone(),
            _ => Gate::Stable,
        }
    }
}

/// What a generated type is.
#[derive(Debug, Clone, PartialEq)]
pub enum ItemKind {
    /// An object with named properties.
    Struct(Struct),
    /// A transparent wrapper: identifiers such as `SessionId(String)`.
    Newtype(Ty),
    /// Any JSON value (`{}` in the schema): extension payloads.
    Any,
    /// String constants; decoding an unknown string keeps it in an `Other` variant.
    StringEnum(Vec<EnumValue>),
    /// An integer with named values and room for any other (`ErrorCode`).
    IntConsts {
        /// The integer type.
        repr: Prim,
        /// The named values.
        consts: Vec<IntConst>,
    },
    /// Objects told apart by a string property; unknown tags are kept whole.
    Tagged(Tagged),
    /// Values told apart by their shape, tried in order.
    Untagged(Vec<UntaggedVariant>),
    /// Another name for a definition (`allOf` of one `$ref`, with annotations beside it):
    /// `InitializeProxyRequest` is `InitializeRequest` under the name of its own method.
    Alias(String),
    /// A definition the generator has no rule for, kept as any JSON value so that it still
    /// decodes and re-encodes unchanged; the reason is reported (and fails `--strict`).
    Untyped {
        /// What the generator could not type, as its error says it.
        reason: String,
    },
}

/// An object type.
#[derive(Debug, Clone, PartialEq)]
pub struct Struct {
    /// Its properties, in schema order.
    pub fields: Vec<Field>,
    /// A union whose variants add properties to this object (`oneOf`/`anyOf` next to
    /// `properties`), flattened into it.
    pub flatten: Option<Flatten>,
}

/// The union flattened into a struct, held by a field of its own.
#[derive(Debug, Clone, PartialEq)]
pub struct Flatten {
    /// The Rust field name: after the tag (`type` reads as `kind`) or the union's last word.
    pub field: String,
    /// The union item's name.
    pub ty: String,
    /// The field's doc comment.
    pub doc: String,
    /// The tag is an optional member of the object: the field is an `Option`, `None` when no
    /// variant is there.
    pub optional: bool,
}

/// A property of an object type.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The property name on the wire.
    pub wire: String,
    /// The property's description.
    pub doc: Option<String>,
    /// Its type, `null` left out (see `nullable`).
    pub ty: Ty,
    /// Listed in the schema's `required`.
    pub required: bool,
    /// The schema admits `null` for this property.
    pub nullable: bool,
    /// The type holds `null` itself (any JSON value: no `type` in the schema): a present `null`
    /// is a value like any other, so absent (`None`) and `null` (`Some(Value::Null)`) stay apart
    /// without a second `Option`.
    pub holds_null: bool,
    /// The schema gives a present `null` a meaning of its own (patch semantics: absent leaves
    /// the value unchanged, `null` clears it), so the two stay apart even for a free-form
    /// object, where they usually mean the same (`_meta` of v2's upsert updates).
    pub null_clears: bool,
    /// `x-deserialize-default-on-error`: a malformed value decodes as the default.
    pub default_on_error: bool,
    /// `x-deserialize-skip-invalid-items`: malformed array items are dropped.
    pub skip_invalid_items: bool,
    /// `x-deserialize-default-on-null`: a present `null` decodes as the default.
    pub default_on_null: bool,
    /// The features it is compiled under.
    pub gate: Gate,
}

/// One string constant of an [`ItemKind::StringEnum`].
#[derive(Debug, Clone, PartialEq)]
pub struct EnumValue {
    /// The string on the wire.
    pub wire: String,
    /// The constant's description.
    pub doc: Option<String>,
    /// The features it is compiled under.
    pub gate: Gate,
}

/// One named value of an [`ItemKind::IntConsts`].
#[derive(Debug, Clone, PartialEq)]
pub struct IntConst {
    /// The constant's name, from its `title` (`Parse error` → `PARSE_ERROR`).
    pub name: String,
    /// Its value, within the range of the integer type.
    pub value: i64,
    /// The constant's description.
    pub doc: Option<String>,
}

/// A union told apart by a tag property.
#[derive(Debug, Clone, PartialEq)]
pub struct Tagged {
    /// The discriminating property (`type`, `sessionUpdate`, `outcome`, ...).
    pub tag: String,
    /// The variants that pin the tag to a string constant, in schema order.
    pub variants: Vec<TaggedVariant>,
    /// The variant used when the tag property is absent (e.g. `McpServer` stdio).
    pub untagged_default: Option<DefaultVariant>,
}

/// A variant of a [`Tagged`] union.
#[derive(Debug, Clone, PartialEq)]
pub struct TaggedVariant {
    /// Its tag value.
    pub wire: String,
    /// The variant's description.
    pub doc: Option<String>,
    /// What it carries besides the tag.
    pub payload: Payload,
    /// The features it is compiled under.
    pub gate: Gate,
}

/// The variant of a [`Tagged`] union that has no tag property.
#[derive(Debug, Clone, PartialEq)]
pub struct DefaultVariant {
    /// The Rust variant name: its `title`, else its payload type.
    pub name: String,
    /// The variant's own tag value (its `title`, e.g. `stdio`): some peers write the tag
    /// anyway, and it decodes as this variant too. Not written back.
    pub wire: Option<String>,
    /// The variant's description.
    pub doc: Option<String>,
    /// What it carries.
    pub payload: Payload,
    /// An unknown tag value decodes as this variant too when the rest of the object reads as
    /// its payload (the unknown value is not kept): the variant leaves the tag unconstrained
    /// and its description says unknown values belong to it (`SetSessionConfigOptionRequest`
    /// `value_id`). Otherwise an unknown tag goes to the fallback variant.
    pub takes_unknown_tags: bool,
}

/// What a union variant carries besides its tag.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// Nothing: `{"outcome": "cancelled"}`.
    Unit,
    /// The properties of a named type, side by side with the tag.
    Type(String),
    /// A single property holding a value: `{"type": "boolean", "value": true}`.
    Property {
        /// The property name on the wire.
        wire: String,
        /// Its type.
        ty: Ty,
    },
}

/// A variant of an [`ItemKind::Untagged`] union.
#[derive(Debug, Clone, PartialEq)]
pub struct UntaggedVariant {
    /// The Rust variant name: its `title`, else the type it names.
    pub name: String,
    /// The variant's description.
    pub doc: Option<String>,
    /// The value it holds.
    pub ty: Ty,
}

/// The type of a field or variant payload.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Ty {
    /// A JSON primitive.
    Prim(Prim),
    /// Any JSON value.
    Value,
    /// A JSON object with arbitrary members (`_meta`, extension params).
    Object,
    /// An array.
    Vec(Box<Ty>),
    /// A JSON object whose members all have one type.
    Map(Box<Ty>),
    /// A generated type, by name.
    Named(String),
}

/// A JSON primitive, by the Rust type it maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prim {
    /// `string`.
    String,
    /// `boolean`.
    Bool,
    /// `integer`, format `int8`.
    I8,
    /// `integer`, format `int16`.
    I16,
    /// `integer`, format `int32`.
    I32,
    /// `integer`, format `int64`, `int` or none.
    I64,
    /// `integer`, format `uint8`.
    U8,
    /// `integer`, format `uint16`.
    U16,
    /// `integer`, format `uint32`.
    U32,
    /// `integer`, format `uint64` or `uint`.
    U64,
    /// `number`.
    F64,
    /// `null`: `()`.
    Null,
}

impl Prim {
    /// The values an integer type holds; `None` for the other types.
    pub fn int_range(self) -> Option<(i128, i128)> {
        Some(match self {
            Prim::I8 => (i8::MIN.into(), i8::MAX.into()),
            Prim::I16 => (i16::MIN.into(), i16::MAX.into()),
            Prim::I32 => (i32::MIN.into(), i32::MAX.into()),
            Prim::I64 => (i64::MIN.into(), i64::MAX.into()),
            Prim::U8 => (0, u8::MAX.into()),
            Prim::U16 => (0, u16::MAX.into()),
            Prim::U32 => (0, u32::MAX.into()),
            Prim::U64 => (0, u64::MAX.into()),
            Prim::String | Prim::Bool | Prim::F64 | Prim::Null => return None,
        })
    }
}

impl Ty {
    /// Whether the value holds `number`s (`f64`) of its own, not inside a named type: they are
    /// written as JavaScript writes them (`serde_support::number`).
    pub fn has_number(&self) -> bool {
        match self {
            Ty::Prim(Prim::F64) => true,
            Ty::Vec(t) | Ty::Map(t) => t.has_number(),
            _ => false,
        }
    }

    /// Named types this type refers to.
    pub fn visit_names<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Ty::Named(n) => out.push(n),
            Ty::Vec(t) | Ty::Map(t) => t.visit_names(out),
            Ty::Prim(_) | Ty::Value | Ty::Object => {}
        }
    }
}

impl Item {
    /// Every named type this item refers to, in order.
    pub fn references(&self) -> Vec<&str> {
        let mut out = Vec::new();
        match &self.kind {
            ItemKind::Struct(s) => {
                for f in &s.fields {
                    f.ty.visit_names(&mut out);
                }
                if let Some(f) = &s.flatten {
                    out.push(&f.ty);
                }
            }
            ItemKind::Newtype(t) => t.visit_names(&mut out),
            ItemKind::Alias(target) => out.push(target),
            ItemKind::Tagged(t) => {
                let payloads = t.variants.iter().map(|v| &v.payload);
                for p in payloads.chain(t.untagged_default.iter().map(|d| &d.payload)) {
                    match p {
                        Payload::Unit => {}
                        Payload::Type(n) => out.push(n),
                        Payload::Property { ty, .. } => ty.visit_names(&mut out),
                    }
                }
            }
            ItemKind::Untagged(vs) => {
                for v in vs {
                    v.ty.visit_names(&mut out);
                }
            }
            ItemKind::Any | ItemKind::Untyped { .. } | ItemKind::StringEnum(_) | ItemKind::IntConsts { .. } => {}
        }
        out
    }
}

/// Which peer handles a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    /// The agent (the client sends the method).
    Agent,
    /// The client (the agent sends the method).
    Client,
    /// A proxy and its conductor (`x-side: "proxy"`): the conductor sends `proxy/initialize`,
    /// and `proxy/successor` goes both ways between the two.
    Proxy,
}

impl Side {
    /// Who sends the methods this side handles.
    pub(crate) fn sender(self) -> &'static str {
        match self {
            Side::Agent => "client",
            Side::Client => "agent",
            Side::Proxy => "conductor",
        }
    }
}

/// A protocol method, handled by `side`.
#[derive(Debug, Clone, PartialEq)]
pub struct Method {
    /// The wire name, e.g. `session/prompt`.
    pub name: String,
    /// The Rust function name, e.g. `session_prompt` (the wire name in snake case, cross-checked
    /// with `meta.json` where there is one).
    pub rust: String,
    /// The peer that handles it.
    pub side: Side,
    /// The params type.
    pub params: String,
    /// The result type for requests; `None` for notifications.
    pub response: Option<String>,
    /// The params type's description.
    pub doc: Option<String>,
    /// The peer cannot work without a handler for it (the spec's baseline methods).
    pub baseline: bool,
    /// The features it is compiled under.
    pub gate: Gate,
}

impl Method {
    /// Whether it is a request (it has a result) rather than a notification.
    pub(crate) fn is_request(&self) -> bool {
        self.response.is_some()
    }
}

/// Everything generated from one schema version.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// The generated types: the definitions in schema order, then those synthesised for
    /// inline constructs.
    pub items: Vec<Item>,
    /// The methods of both sides.
    pub methods: Vec<Method>,
    /// `$/cancel_request` and friends, handled by the connection itself: (method, params type).
    pub protocol_methods: Vec<(String, String)>,
    /// The protocol version the schema describes (`meta.json`'s `version`, or the folder's
    /// `v1`): the latest one a peer built from it speaks. `None` for a folder that says neither.
    pub protocol_version: Option<u16>,
}

impl Gate {
    /// Whether this gate is on when exactly `features` are enabled.
    pub fn enabled(&self, features: &BTreeSet<String>) -> bool {
        match self {
            Gate::Stable => true,
            Gate::Features(fs) => fs.iter().any(|f| features.contains(f)),
            Gate::WithoutFeature(f) => !features.contains(f),
        }
    }
}

/// A definition the generator emitted as raw JSON, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UntypedDefinition {
    /// The definition (the Rust type's name).
    pub name: String,
    /// What the generator had no rule for.
    pub reason: String,
}

impl std::fmt::Display for UntypedDefinition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "definition `{}`: cannot generate {}", self.name, self.reason)
    }
}

impl Model {
    /// The definitions emitted as raw JSON because no rule typed them, in order.
    pub fn untyped(&self) -> Vec<UntypedDefinition> {
        self.items
            .iter()
            .filter_map(|i| match &i.kind {
                ItemKind::Untyped { reason } => {
                    Some(UntypedDefinition { name: i.name.clone(), reason: reason.clone() })
                }
                _ => None,
            })
            .collect()
    }

    /// The item `name` stands for, through any aliases (`InitializeProxyRequest` →
    /// `InitializeRequest`).
    pub fn resolve(&self, name: &str) -> Option<&Item> {
        let mut item = self.items.iter().find(|i| i.name == name)?;
        // Bounded: a cycle of aliases (which no schema can mean) resolves to nothing.
        for _ in 0..self.items.len() {
            match &item.kind {
                ItemKind::Alias(target) => item = self.items.iter().find(|i| &i.name == target)?,
                _ => return Some(item),
            }
        }
        None
    }

    /// The model as compiled with `features`: gated-off items, fields, variants and methods
    /// removed and every gate resolved, for a vendored file that has no cargo features.
    pub fn select(&self, features: &BTreeSet<String>) -> Model {
        let on = |g: &Gate| g.enabled(features);
        let items = self
            .items
            .iter()
            .filter(|i| on(&i.gate))
            .map(|i| {
                let mut i = i.clone();
                i.gate = Gate::Stable;
                match &mut i.kind {
                    ItemKind::Struct(s) => {
                        s.fields.retain(|f| on(&f.gate));
                        s.fields.iter_mut().for_each(|f| f.gate = Gate::Stable);
                    }
                    ItemKind::Tagged(t) => {
                        t.variants.retain(|v| on(&v.gate));
                        t.variants.iter_mut().for_each(|v| v.gate = Gate::Stable);
                    }
                    ItemKind::StringEnum(vs) => {
                        vs.retain(|v| on(&v.gate));
                        vs.iter_mut().for_each(|v| v.gate = Gate::Stable);
                    }
                    _ => {}
                }
                i
            })
            .collect::<Vec<_>>();
        let methods =
            self.methods.iter().filter(|m| on(&m.gate)).map(|m| Method { gate: Gate::Stable, ..m.clone() }).collect();
        let protocol_methods = self
            .protocol_methods
            .iter()
            .filter(|(_, params)| items.iter().any(|i| &i.name == params))
            .cloned()
            .collect();
        Model { items, methods, protocol_methods, protocol_version: self.protocol_version }
    }
}
