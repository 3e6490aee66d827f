//! Emission: IR items and methods → Rust tokens.
//!
//! The shapes, and why:
//! - structs are `#[non_exhaustive]` with a constructor taking the required fields and a
//!   setter per optional field, so a new optional field in the spec breaks no caller;
//! - optional fields are `Option`s skipped when `None`, so absent stays absent on re-encode;
//! - every union and string enum has a fallback variant that keeps what an unknown tag or
//!   value carried and writes it back unchanged, so a newer peer never breaks decoding;
//! - tagged unions are hand-serialised here rather than with `#[serde(tag)]`, which has no
//!   fallback that keeps the payload.

use proc_macro2::{Literal, TokenStream};
use quote::{ToTokens, format_ident, quote};

use super::ir::*;
use super::naming::{field_ident, ident, pascal, screaming_snake, sentence, setter_ident, snake};
use super::syntax;

/// Doc attributes from a description; one `#[doc]` per line so rustdoc sees the markdown.
/// While descriptions are deferred ([`super::docs`]), one placeholder attribute instead.
pub fn doc(text: Option<&str>) -> TokenStream {
    let attrs = syntax::doc_attrs(text);
    quote!(#(#attrs)*)
}

/// An item's description, or, where the schema has none, a sentence saying so (every public
/// item of the generated crate is documented: it warns on `missing_docs`, and CI and
/// `check-releases` deny warnings).
fn item_doc(item: &Item) -> String {
    let doc =
        item.doc.clone().unwrap_or_else(|| format!("The schema's `{}` (the schema does not describe it).", item.name));
    match &item.kind {
        ItemKind::Untyped { reason } => {
            // Brackets in a reason (a keyword list) would read as links.
            let reason = reason.replace('[', "\\[").replace(']', "\\]");
            format!(
                "{doc}\n\nNot typed: the generator has no rule for {reason}. The value is kept as raw JSON \
                 and written back unchanged."
            )
        }
        _ => doc,
    }
}

/// A description with, for an item compiled only with some cargo feature, a last paragraph
/// naming it (the schema's "**UNSTABLE**" does not say which feature that is).
pub fn gated_doc(text: Option<&str>, gate: &Gate) -> Option<String> {
    let Gate::Features(features) = gate else { return text.map(str::to_owned) };
    let names: Vec<String> = features.iter().map(|f| format!("`{f}`")).collect();
    let note = match &names[..] {
        [one] => format!("Available with the cargo feature {one}."),
        _ => format!("Available with any of the cargo features {}.", names.join(", ")),
    };
    Some(match text {
        Some(text) => format!("{text}\n\n{note}"),
        None => note,
    })
}

/// The `#[cfg(...)]` attribute of a gate; nothing when the gate is always on.
pub(crate) fn cfg(gate: &Gate) -> TokenStream {
    match cfg_predicate(gate) {
        Some(predicate) => quote!(#[cfg(#predicate)]),
        None => TokenStream::new(),
    }
}

/// [`cfg()`] as a syntax node.
fn cfg_attrs(gate: &Gate) -> Vec<syn::Attribute> {
    cfg_predicate(gate).map(|predicate| syntax::attr_list("cfg", predicate)).into_iter().collect()
}

/// What goes inside `#[cfg(...)]`; `None` when the gate is always on.
fn cfg_predicate(gate: &Gate) -> Option<TokenStream> {
    Some(match gate {
        Gate::Stable => return None,
        Gate::Features(fs) if fs.len() == 1 => {
            let f = fs.iter().next().map(String::as_str).unwrap_or_default();
            quote!(feature = #f)
        }
        Gate::Features(fs) => {
            let fs = fs.iter();
            quote!(any(#(feature = #fs),*))
        }
        Gate::WithoutFeature(f) => quote!(not(feature = #f)),
    })
}

/// The Rust type of an IR type.
fn rust_ty(ty: &Ty) -> TokenStream {
    syn_ty(ty).into_token_stream()
}

/// [`rust_ty`] as a syntax node.
fn syn_ty(ty: &Ty) -> syn::Type {
    use syntax::{generic_path, path, path_ty};
    match ty {
        Ty::Prim(p) => prim_name(*p).map_or_else(syntax::unit_ty, |name| path_ty(path(&[name]))),
        Ty::Value => path_ty(path(&["serde_json", "Value"])),
        Ty::Object => {
            path_ty(generic_path(&["serde_json", "Map"], vec![syn_ty(&Ty::Prim(Prim::String)), syn_ty(&Ty::Value)]))
        }
        Ty::Vec(t) => path_ty(generic_path(&["Vec"], vec![syn_ty(t)])),
        Ty::Map(t) => path_ty(generic_path(&["serde_support", "OrderedMap"], vec![syn_ty(t)])),
        Ty::Named(n) => path_ty(syn::Path::from(ident(n))),
    }
}

/// The name of a primitive type; `None` for `()`.
fn prim_name(p: Prim) -> Option<&'static str> {
    Some(match p {
        Prim::String => "String",
        Prim::Bool => "bool",
        Prim::I8 => "i8",
        Prim::I16 => "i16",
        Prim::I32 => "i32",
        Prim::I64 => "i64",
        Prim::U8 => "u8",
        Prim::U16 => "u16",
        Prim::U32 => "u32",
        Prim::U64 => "u64",
        Prim::F64 => "f64",
        Prim::Null => return None,
    })
}

/// `JsonSchema` for the types whose serde shape schemars derives correctly.
fn schemars_derive() -> TokenStream {
    quote!(#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))])
}

/// One item as syntax, for formatting: a struct (the most frequent and most regular item) is
/// built as nodes (the `syntax` module), any other item parsed from its tokens.
pub fn item_syntax(item: &Item, model: &Model) -> syn::Result<Vec<syn::Item>> {
    match &item.kind {
        ItemKind::Struct(s) => Ok(structure(item, s)),
        _ => syn::parse2::<syn::File>(self::item(item, model)).map(|f| f.items),
    }
}

/// Emits one item (`model` is the rest of the schema, for what the item's code depends on).
pub fn item(item: &Item, model: &Model) -> TokenStream {
    let name = ident(&item.name);
    let docs = doc(gated_doc(Some(&item_doc(item)), &item.gate).as_deref());
    // The gate goes on every item the body expands to (the type and its impls).
    let gate = &cfg(&item.gate);
    let body = match &item.kind {
        ItemKind::Struct(s) => {
            let items = structure(item, s);
            return quote!(#(#items)*);
        }
        ItemKind::Newtype(ty) if item.name == "ProtocolVersion" => {
            let mut body = newtype(gate, &name, ty);
            if let Some(latest) = model.protocol_version {
                body.extend(protocol_versions(gate, &name, ty, latest));
            }
            body
        }
        ItemKind::Newtype(ty) => newtype(gate, &name, ty),
        ItemKind::Any | ItemKind::Untyped { .. } => newtype(gate, &name, &Ty::Value),
        ItemKind::Alias(target) => {
            let target = ident(target);
            quote!(#gate pub type #name = #target;)
        }
        ItemKind::StringEnum(values) => string_enum(gate, &name, values),
        ItemKind::IntConsts { repr, consts } => int_consts(gate, &name, *repr, consts),
        ItemKind::Tagged(t) => {
            let mut body = tagged(gate, &name, t);
            body.extend(payload_conversions(item, tagged_payloads(t)));
            body
        }
        ItemKind::Untagged(vs) => {
            let mut body = untagged(gate, &name, vs, &model.items);
            let payloads = vs.iter().filter_map(|v| match &v.ty {
                Ty::Named(n) => Some((ident(&v.name), n.as_str(), Gate::Stable)),
                _ => None,
            });
            body.extend(payload_conversions(item, payloads.collect()));
            body
        }
    };
    quote!(#docs #body)
}

/// Fails when two names of the schema become one Rust name in `item` (properties `fooBar` and
/// `foo_bar`, `meta` and `_meta`; values `end_turn` and `endTurn`), which would otherwise be
/// code that does not compile. Uses the same naming functions as the emitter.
pub fn check_names(item: &Item) -> super::Result<()> {
    fn first_clash<'a>(names: impl IntoIterator<Item = (String, &'a str)>) -> Option<(&'a str, &'a str, String)> {
        let mut seen: std::collections::BTreeMap<String, &str> = std::collections::BTreeMap::new();
        for (rust, source) in names {
            if let Some(first) = seen.get(&rust) {
                return Some((first, source, rust));
            }
            seen.insert(rust, source);
        }
        None
    }
    let clash = |what: &str, rust_what: &str, (a, b, rust): (&str, &str, String)| {
        Err(super::CodegenError::unsupported(
            &item.name,
            &format!("{what} `{a}` and `{b}`, which both become the Rust {rust_what} `{rust}`"),
        ))
    };
    let bare = |id: proc_macro2::Ident| id.to_string().trim_start_matches("r#").to_owned();
    match &item.kind {
        ItemKind::Struct(s) => {
            let fields = s.fields.iter().map(|f| (bare(field_ident(&f.wire)), f.wire.as_str()));
            let flattened = s.flatten.iter().map(|f| (bare(field_ident(&f.field)), f.ty.as_str()));
            if let Some(c) = first_clash(fields.chain(flattened)) {
                return clash("properties", "field", c);
            }
            let setters =
                s.fields.iter().filter(|f| !f.required).map(|f| (bare(setter_ident(&f.wire)), f.wire.as_str()));
            if let Some(c) = first_clash(std::iter::once(("new".to_owned(), "(the constructor)")).chain(setters)) {
                return clash("properties", "method", c);
            }
        }
        ItemKind::StringEnum(values) => {
            if let Some(c) = first_clash(values.iter().map(|v| (pascal(&v.wire), v.wire.as_str()))) {
                return clash("values", "variant", c);
            }
        }
        ItemKind::Tagged(t) => {
            let tagged = t.variants.iter().map(|v| (pascal(&v.wire), v.wire.as_str()));
            let default = t.untagged_default.iter().map(|d| (d.name.clone(), d.name.as_str()));
            if let Some(c) = first_clash(tagged.chain(default)) {
                return clash("variants", "variant", c);
            }
        }
        ItemKind::Untagged(vs) => {
            if let Some(c) = first_clash(vs.iter().map(|v| (v.name.clone(), v.name.as_str()))) {
                return clash("variants", "variant", c);
            }
        }
        ItemKind::IntConsts { consts, .. } => {
            if let Some(c) = first_clash(consts.iter().map(|c| (c.name.clone(), c.name.as_str()))) {
                return clash("constants", "constant", c);
            }
        }
        ItemKind::Newtype(_) | ItemKind::Any | ItemKind::Alias(_) | ItemKind::Untyped { .. } => {}
    }
    Ok(())
}

/// How a field holds its value.
#[derive(Clone, Copy, PartialEq)]
enum Presence {
    /// Required and never null: `T`.
    Plain,
    /// `Option<T>`: optional (skipped when `None`), or required but nullable (written as `null`).
    Option,
    /// `Option<Option<T>>`: optional and nullable, where absent (`None`) and `null`
    /// (`Some(None)`) are told apart, so an update can clear a value.
    /// `_meta`-like free-form objects are exempt, where the spec defines absent and `null` as
    /// equal, but not where the schema gives `null` a meaning ([`Field::null_clears`]).
    Tri,
}

/// The last paragraph of an optional nullable field's description: how to read it. The link
/// resolves in the generated crate and in a vendored file alike (both have `serde_support`).
const NULLABLE_NOTE: &str = "Absent, `null` or a value: see [`Nullable`](serde_support::Nullable) \
     (`.value()` reads it, `.is_null()` tells `null` from absent).";

fn presence(f: &Field) -> Presence {
    match (f.required, f.nullable) {
        // A type that holds `null` itself (any JSON value) needs no `Option` for it.
        (true, _) if f.holds_null => Presence::Plain,
        (false, _) if f.holds_null => Presence::Option,
        (true, false) => Presence::Plain,
        (false, true) if f.ty != Ty::Object || f.null_clears => Presence::Tri,
        _ => Presence::Option,
    }
}

/// The field's type as declared.
fn field_syn_ty(f: &Field) -> syn::Type {
    let option = |t| syntax::path_ty(syntax::generic_path(&["Option"], vec![t]));
    match presence(f) {
        Presence::Plain => syn_ty(&f.ty),
        Presence::Option => option(syn_ty(&f.ty)),
        Presence::Tri => option(option(syn_ty(&f.ty))),
    }
}

/// A struct as syntax nodes ([`syntax`]): its definition, its `impl` with the constructor and
/// a setter per optional field, and its `Deserialize` (unless it derives one).
fn structure(item: &Item, s: &Struct) -> Vec<syn::Item> {
    let name = ident(&item.name);
    // Structs with a flattened union keep serde's derive; the others get a generated
    // `Deserialize` (see `deserialize_struct`), which compiles faster.
    let derive_de = s.flatten.is_some();
    let mut fields = Vec::new();
    let mut ctor_params = Vec::new();
    let mut ctor_inits = Vec::new();
    let mut setters = Vec::new();
    for f in &s.fields {
        let id = field_ident(&f.wire);
        let mut serde = Vec::new();
        if id.to_string().trim_start_matches("r#") != f.wire {
            let wire = &f.wire;
            serde.push(quote!(rename = #wire));
        }
        let presence = presence(f);
        if !f.required {
            serde.push(quote!(skip_serializing_if = "Option::is_none"));
        }
        if f.ty.has_number() {
            serde.push(quote!(serialize_with = "serde_support::number"));
        }
        if derive_de {
            if !f.required {
                serde.push(quote!(default));
            }
            if let Some(helper) = deserialize_helper(f) {
                let helper = format!("serde_support::{helper}");
                serde.push(quote!(deserialize_with = #helper));
            }
        }
        let undescribed = format!("The `{}` member (the schema does not describe it).", f.wire);
        let mut doc = gated_doc(Some(f.doc.as_deref().unwrap_or(&undescribed)), &f.gate);
        if presence == Presence::Tri {
            doc = Some(match doc {
                Some(text) => format!("{text}\n\n{NULLABLE_NOTE}"),
                None => NULLABLE_NOTE.to_owned(),
            });
        }
        let mut attrs = syntax::doc_attrs(doc.as_deref());
        attrs.extend(cfg_attrs(&f.gate));
        if !serde.is_empty() {
            attrs.push(syntax::attr_list("serde", quote!(#(#serde),*)));
        }
        fields.push(syntax::pub_field(attrs, &id, field_syn_ty(f)));

        if f.required {
            let (param_ty, conv) = into_param(&f.ty, &id);
            let value = if presence == Presence::Option { syntax::expr_call("Some", conv) } else { conv };
            ctor_params.push(syntax::param(cfg_attrs(&f.gate), &id, param_ty));
            ctor_inits.push((cfg_attrs(&f.gate), id, value));
        } else {
            ctor_inits.push((cfg_attrs(&f.gate), id.clone(), syntax::expr_path(syntax::path(&["None"]))));
            let (param_ty, conv) = match presence {
                // `impl Into<Option<T>>`: a value, `Some(value)` and `None` (`null`) all fit, so
                // the setter reads like the plain ones (`status(ToolCallStatus::Completed)`).
                Presence::Tri => (
                    syntax::impl_into(syntax::path_ty(syntax::generic_path(&["Option"], vec![syn_ty(&f.ty)]))),
                    syntax::expr_method(syntax::expr_ident(&id), "into"),
                ),
                _ => into_param(&f.ty, &id),
            };
            let field_name = id.to_string();
            let field_name = field_name.trim_start_matches("r#");
            let setter = setter_ident(&f.wire);
            // A setter named otherwise than its field (`default_value`) is so because a method
            // has the field's name (`Default::default`): the link must say it means the field.
            let link = if setter.to_string().trim_start_matches("r#") == field_name {
                format!("[`Self::{field_name}`]")
            } else {
                format!("[`Self::{field_name}`](field@Self::{field_name})")
            };
            let setter_doc = if presence == Presence::Tri {
                // What `null` means is the field's own business (for some it is the same as
                // absent); the setter only says what it writes.
                format!(
                    "Sets {link}; `None` writes `null` (the field's description says what that means; a \
                     field never set is left out)."
                )
            } else if f.holds_null {
                format!("Sets {link}; a `null` value writes an explicit `null`.")
            } else {
                format!("Sets {link}.")
            };
            setters.push(option_setter(&setter_doc, cfg_attrs(&f.gate), &setter, &id, param_ty, conv));
        }
    }
    if let Some(flat) = &s.flatten {
        let id = field_ident(&flat.field);
        let ty = Ty::Named(flat.ty.clone());
        let mut attrs = syntax::doc_attrs(Some(&flat.doc));
        attrs.push(syntax::attr_list("serde", quote!(flatten)));
        let (param_ty, conv) = into_param(&ty, &id);
        if flat.optional {
            // serde reads a flattened `Option` as `None` when the union does not decode.
            fields.push(syntax::pub_field(
                attrs,
                &id,
                syntax::path_ty(syntax::generic_path(&["Option"], vec![syn_ty(&ty)])),
            ));
            ctor_inits.push((Vec::new(), id.clone(), syntax::expr_path(syntax::path(&["None"]))));
            let field_name = id.to_string();
            let setter_doc = format!("Sets [`Self::{}`].", field_name.trim_start_matches("r#"));
            setters.push(option_setter(&setter_doc, Vec::new(), &setter_ident(&flat.field), &id, param_ty, conv));
        } else {
            fields.push(syntax::pub_field(attrs, &id, syn_ty(&ty)));
            ctor_params.push(syntax::param(Vec::new(), &id, param_ty));
            ctor_inits.push((Vec::new(), id, conv));
        }
    }

    // A required session id comes first, whatever the schema's member order: every session
    // request then starts with the session it is about, and `cwd` (also a string) never sits
    // where a swapped `session_id` would still compile (`LoadSessionRequest`).
    if let Some(at) = ctor_params.iter().position(|p| param_name(p).as_deref() == Some("session_id")) {
        let session_id = ctor_params.remove(at);
        ctor_params.insert(0, session_id);
    }

    debug_assert_eq!(ctor_params.is_empty(), derives_default(item));
    let default = if ctor_params.is_empty() { quote!(Default,) } else { quote!() };
    let de_derive = if derive_de { quote!(serde::Deserialize,) } else { quote!() };
    let mut attrs = syntax::doc_attrs(gated_doc(Some(&item_doc(item)), &item.gate).as_deref());
    attrs.extend(cfg_attrs(&item.gate));
    attrs.push(syntax::attr_list("derive", quote!(Debug, Clone, PartialEq, #default serde::Serialize, #de_derive)));
    attrs.push(syntax::attr_list("cfg_attr", quote!(feature = "schemars", derive(schemars::JsonSchema))));
    attrs.push(syntax::attr_word("non_exhaustive"));
    let definition = syntax::pub_struct(attrs, &name, fields);

    let mut ctor_attrs = syntax::doc_attrs(Some(if ctor_params.is_empty() {
        "Creates a value with every optional field unset."
    } else {
        "Creates a value from its required fields; optional fields start unset."
    }));
    // `new()` without parameters comes with a derived `Default`; only a constructor whose
    // parameters are all feature-gated can lose them all without one.
    if !ctor_params.is_empty() && ctor_params.iter().all(|p| matches!(p, syn::FnArg::Typed(t) if !t.attrs.is_empty())) {
        ctor_attrs.push(syntax::attr_list("allow", quote!(clippy::new_without_default)));
    }
    let ctor = syntax::pub_fn_returning_self(
        ctor_attrs,
        &ident("new"),
        ctor_params,
        vec![(syntax::expr_struct(&name, ctor_inits), false)],
    );
    let mut fns = vec![ctor];
    fns.extend(setters);
    let mut out =
        vec![syn::Item::Struct(definition), syn::Item::Impl(syntax::inherent_impl(cfg_attrs(&item.gate), &name, fns))];
    if !derive_de {
        out.push(syn::Item::Macro(deserialize_struct(&item.gate, &name, s)));
    }
    out
}

/// A setter of an `Option` field: `pub fn setter(mut self, id: param_ty) -> Self`, which stores
/// `Some(conv)`.
fn option_setter(
    doc: &str,
    cfg: Vec<syn::Attribute>,
    setter: &proc_macro2::Ident,
    id: &proc_macro2::Ident,
    param_ty: syn::Type,
    conv: syn::Expr,
) -> syn::ImplItem {
    let mut attrs = syntax::doc_attrs(Some(doc));
    attrs.extend(cfg);
    attrs.push(syntax::attr_word("must_use"));
    let body = vec![
        (syntax::expr_assign_self_field(id, syntax::expr_call("Some", conv)), true),
        (syntax::expr_path(syntax::path(&["self"])), false),
    ];
    syntax::pub_fn_returning_self(
        attrs,
        setter,
        vec![syntax::mut_self(), syntax::param(Vec::new(), id, param_ty)],
        body,
    )
}

/// Whether `item` is a struct that derives `Default`: one whose constructor takes nothing
/// (every field optional, no flattened union or an optional one).
pub fn derives_default(item: &Item) -> bool {
    matches!(&item.kind, ItemKind::Struct(s)
        if s.flatten.as_ref().is_none_or(|f| f.optional) && s.fields.iter().all(|f| !f.required))
}

/// A streaming `Deserialize` for a plain struct, through `serde_support::deserialize_struct!`
/// (one pass over the map, unknown keys skipped, lenient fields through their markers).
fn deserialize_struct(gate: &Gate, name: &proc_macro2::Ident, s: &Struct) -> syn::ItemMacro {
    let fields = s.fields.iter().map(|f| {
        let id = field_ident(&f.wire);
        let fgate = cfg(&f.gate);
        let wire = &f.wire;
        let how = if presence(f) == Presence::Plain { quote!(required) } else { quote!(optional) };
        let marker = deserialize_helper(f).map(|helper| {
            let marker = ident(&pascal(&helper));
            quote!((#marker))
        });
        quote!(#fgate #id: #wire => #how #marker)
    });
    syntax::macro_call(cfg_attrs(gate), &["serde_support", "deserialize_struct"], quote!(#name { #(#fields),* }))
}

/// Constructor and setter parameters take `impl Into<T>` where that reads naturally: the
/// parameter's type and the expression that turns it into the field's.
fn into_param(ty: &Ty, id: &proc_macro2::Ident) -> (syn::Type, syn::Expr) {
    let inner = syn_ty(ty);
    match ty {
        Ty::Prim(Prim::String) | Ty::Named(_) | Ty::Map(_) => {
            (syntax::impl_into(inner), syntax::expr_method(syntax::expr_ident(id), "into"))
        }
        _ => (inner, syntax::expr_ident(id)),
    }
}

/// The helper a field needs to decode, if any: lenient decoding, or telling `null` from
/// absent. A function in `serde_support`; its marker type for `next_lenient` is the same
/// name in PascalCase.
fn deserialize_helper(f: &Field) -> Option<String> {
    if f.holds_null {
        // Any JSON value decodes, so there is nothing to be lenient about; a present `null`
        // must stay `Some(Value::Null)` (plain `Option` reads it as `None`).
        return (presence(f) == Presence::Option).then(|| "present".to_owned());
    }
    let skip = f.skip_invalid_items && matches!(f.ty, Ty::Vec(_));
    let base = match (presence(f), skip) {
        (Presence::Tri, true) => "tri_vec_skip_invalid",
        (Presence::Tri, false) => "tri",
        (Presence::Option, true) => "opt_vec_skip_invalid",
        (Presence::Plain, true) => "vec_skip_invalid",
        (_, false) if f.default_on_error => "default_on_error",
        // An optional member reads `null` as absent already.
        (Presence::Plain, false) if f.default_on_null => "default_on_null",
        (_, false) => return None,
    };
    let lenient = if f.default_on_error && base != "default_on_error" { "_or_default" } else { "" };
    Some(format!("{base}{lenient}"))
}

fn newtype(gate: &TokenStream, name: &proc_macro2::Ident, ty: &Ty) -> TokenStream {
    let schemars = schemars_derive();
    let inner = rust_ty(ty);
    let string = matches!(ty, Ty::Prim(Prim::String));
    let derives = match ty {
        Ty::Prim(Prim::String) => {
            quote!(#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)])
        }
        Ty::Prim(Prim::F64) | Ty::Value | Ty::Object => {
            quote!(#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)])
        }
        Ty::Prim(_) => {
            quote!(#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize)])
        }
        _ => quote!(#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]),
    };
    let string_impls = if string {
        quote! {
            #gate impl #name {
                /// The value as a string slice.
                pub fn as_str(&self) -> &str { &self.0 }
            }
            #gate impl From<&str> for #name {
                fn from(value: &str) -> Self { #name(value.to_owned()) }
            }
            #gate impl AsRef<str> for #name {
                fn as_ref(&self) -> &str { &self.0 }
            }
            #gate impl std::fmt::Display for #name {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str(&self.0) }
            }
            #gate impl std::borrow::Borrow<str> for #name {
                fn borrow(&self) -> &str { &self.0 }
            }
        }
    } else {
        quote!()
    };
    let number = if ty.has_number() { quote!(#[serde(serialize_with = "serde_support::number")]) } else { quote!() };
    quote! {
        #gate #derives
        #[serde(transparent)]
        #schemars
        pub struct #name(#number pub #inner);

        #gate impl From<#inner> for #name {
            fn from(value: #inner) -> Self { #name(value) }
        }
        #string_impls
    }
}

/// `ProtocolVersion::V1` up to the version the schema describes, and `LATEST`, that one.
fn protocol_versions(gate: &TokenStream, name: &proc_macro2::Ident, ty: &Ty, latest: u16) -> TokenStream {
    if !matches!(ty, Ty::Prim(p) if p.int_range().is_some_and(|(lo, hi)| lo <= 0 && i128::from(latest) <= hi)) {
        return TokenStream::new();
    }
    let versions = (1..=latest).map(|v| {
        let id = format_ident!("V{v}");
        let value = Literal::u16_unsuffixed(v);
        let d = format!(" Protocol version {v}.");
        quote!(#[doc = #d] pub const #id: #name = #name(#value);)
    });
    let value = Literal::u16_unsuffixed(latest);
    let latest_doc = doc(Some(&format!(
        "The latest protocol version this schema describes ({latest}, the `version` in its `meta.json`):\n\
         the one a client sends in `initialize`.\n\n\
         An agent answers with the client's version when it supports it, and otherwise with the\n\
         latest version it supports: an agent that supports every version up to this one answers\n\
         `params.protocol_version.min({name}::LATEST)`, never the client's version unchecked."
    )));
    quote! {
        #gate impl #name {
            #(#versions)*
            #latest_doc
            pub const LATEST: #name = #name(#value);
        }
    }
}

/// The payload types of a tagged union's variants: (variant, type, gate), for
/// [`payload_conversions`].
fn tagged_payloads(t: &Tagged) -> Vec<(proc_macro2::Ident, &str, Gate)> {
    let mut out: Vec<(proc_macro2::Ident, &str, Gate)> = Vec::new();
    for v in &t.variants {
        if let Payload::Type(n) | Payload::Property { ty: Ty::Named(n), .. } = &v.payload {
            out.push((ident(&pascal(&v.wire)), n.as_str(), v.gate.clone()));
        }
    }
    if let Some(d) = &t.untagged_default
        && let Payload::Type(n) | Payload::Property { ty: Ty::Named(n), .. } = &d.payload
    {
        out.push((ident(&d.name), n.as_str(), Gate::Stable));
    }
    out
}

/// `impl From<Payload> for Union` for every payload type that only one variant holds, so that
/// `ContentChunk::new(TextContent::new("hi"))` reads as it should; a type that two variants
/// hold (`ContentChunk` in the three message chunks) gets none, since the variant is the point.
/// The impl is compiled when both the union and the variant are.
fn payload_conversions(item: &Item, payloads: Vec<(proc_macro2::Ident, &str, Gate)>) -> TokenStream {
    let name = ident(&item.name);
    let item_gate = cfg(&item.gate);
    let mut out = TokenStream::new();
    for (variant, ty, gate) in &payloads {
        if *ty == item.name || payloads.iter().filter(|(_, other, _)| other == ty).count() > 1 {
            continue;
        }
        let ty = ident(ty);
        let gate = cfg(gate);
        out.extend(quote! {
            #item_gate #gate
            impl From<#ty> for #name {
                fn from(value: #ty) -> Self {
                    #name::#variant(value)
                }
            }
        });
    }
    out
}

/// The fallback variant's name: `Other`, unless the schema already has a value by that name.
fn fallback_ident<'a>(taken: impl IntoIterator<Item = &'a str> + Clone) -> proc_macro2::Ident {
    let candidates = ["Other", "Unknown", "Unrecognized"];
    let name = candidates
        .iter()
        .find(|c| !taken.clone().into_iter().any(|t| pascal(t) == **c))
        .unwrap_or(&"UnrecognizedValue");
    ident(name)
}

fn string_enum(gate: &TokenStream, name: &proc_macro2::Ident, values: &[EnumValue]) -> TokenStream {
    let variants: Vec<_> = values.iter().map(|v| ident(&pascal(&v.wire))).collect();
    let other = fallback_ident(values.iter().map(|v| v.wire.as_str()));
    let name_str = name.to_string();
    let schema_values = values.iter().map(|v| {
        let gate = cfg(&v.gate);
        let wire = &v.wire;
        quote!(#gate values.push(#wire);)
    });
    let defs = values.iter().zip(&variants).map(|(v, id)| {
        let undescribed = format!("The value `\"{}\"` (the schema does not describe it).", v.wire);
        let docs = doc(gated_doc(Some(v.doc.as_deref().unwrap_or(&undescribed)), &v.gate).as_deref());
        let gate = cfg(&v.gate);
        quote!(#docs #gate #id,)
    });
    let to_str = values.iter().zip(&variants).map(|(v, id)| {
        let gate = cfg(&v.gate);
        let wire = &v.wire;
        quote!(#gate #name::#id => #wire,)
    });
    let from_str = values.iter().zip(&variants).map(|(v, id)| {
        let gate = cfg(&v.gate);
        let wire = &v.wire;
        quote!(#gate #wire => #name::#id,)
    });
    quote! {
        #gate #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum #name {
            #(#defs)*
            /// A value this version of the schema does not know, kept as received.
            #other(String),
        }

        #gate impl #name {
            /// The value as written on the wire.
            pub fn as_str(&self) -> &str {
                match self {
                    #(#to_str)*
                    #name::#other(other) => other,
                }
            }
        }

        #gate impl From<&str> for #name {
            fn from(value: &str) -> Self {
                match value {
                    #(#from_str)*
                    other => #name::#other(other.to_owned()),
                }
            }
        }

        #gate impl std::fmt::Display for #name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str(self.as_str()) }
        }

        #gate impl serde::Serialize for #name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        #gate impl<'de> serde::Deserialize<'de> for #name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
                Ok(#name::from(value.as_ref()))
            }
        }

        /// The schema lists the known values; decoding also keeps unknown ones.
        #[cfg(feature = "schemars")]
        #gate impl schemars::JsonSchema for #name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                #name_str.into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                #[allow(unused_mut)]
                let mut values: Vec<&str> = Vec::new();
                #(#schema_values)*
                schemars::json_schema!({ "type": "string", "enum": values })
            }
        }
    }
}

fn int_consts(gate: &TokenStream, name: &proc_macro2::Ident, repr: Prim, consts: &[IntConst]) -> TokenStream {
    let name_str = name.to_string();
    let titles: Vec<String> = consts.iter().map(|c| sentence(&c.name)).collect();
    let values: Vec<Literal> = consts.iter().map(|c| int_literal(repr, c.value)).collect();
    let repr_ty = rust_ty(&Ty::Prim(repr));
    let defs = consts.iter().map(|c| {
        let id = format_ident!("{}", c.name);
        let docs = doc(c.doc.as_deref().or(Some(&sentence(&c.name))));
        let value = int_literal(repr, c.value);
        quote!(#docs pub const #id: #name = #name(#value);)
    });
    let names = consts.iter().map(|c| {
        let value = int_literal(repr, c.value);
        let title = sentence(&c.name);
        quote!(#value => Some(#title),)
    });
    quote! {
        #gate #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct #name(pub #repr_ty);

        /// The named codes, and any other integer.
        #[cfg(feature = "schemars")]
        #gate impl schemars::JsonSchema for #name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                #name_str.into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "anyOf": [#({ "title": #titles, "const": #values },)* { "type": "integer" }] })
            }
        }

        #gate impl #name {
            #(#defs)*

            /// The name of a code the schema defines; `None` for any other.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    #(#names)*
                    _ => None,
                }
            }
        }

        #gate impl From<#repr_ty> for #name {
            fn from(value: #repr_ty) -> Self { #name(value) }
        }

        #gate impl std::fmt::Display for #name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.name() {
                    Some(name) => write!(f, "{} ({})", self.0, name),
                    None => write!(f, "{}", self.0),
                }
            }
        }
    }
}

/// A constant of an integer type; classification checked that `value` fits `repr`.
fn int_literal(repr: Prim, value: i64) -> Literal {
    debug_assert!(repr.int_range().is_some_and(|(lo, hi)| (lo..=hi).contains(&i128::from(value))));
    Literal::i64_unsuffixed(value)
}

fn payload_ty(p: &Payload) -> Option<TokenStream> {
    match p {
        Payload::Unit => None,
        Payload::Type(n) => {
            let n = ident(n);
            Some(quote!(#n))
        }
        Payload::Property { ty, .. } => Some(rust_ty(ty)),
    }
}

fn tagged(gate: &TokenStream, name: &proc_macro2::Ident, t: &Tagged) -> TokenStream {
    let tag = &t.tag;
    let other = fallback_ident(
        t.variants.iter().map(|v| v.wire.as_str()).chain(t.untagged_default.iter().map(|d| d.name.as_str())),
    );
    let mut defs = Vec::new();
    let mut ser = Vec::new();
    let mut de = Vec::new();
    let mut tags = Vec::new();
    for v in &t.variants {
        let id = ident(&pascal(&v.wire));
        let undescribed = format!("`{tag}` is `\"{}\"` (the schema does not describe this variant).", v.wire);
        let docs = doc(gated_doc(Some(v.doc.as_deref().unwrap_or(&undescribed)), &v.gate).as_deref());
        let gate = cfg(&v.gate);
        let wire = &v.wire;
        match &v.payload {
            Payload::Unit => {
                defs.push(quote!(#docs #gate #id,));
                ser.push(quote!(#gate #name::#id => serde_support::serialize_tag(serializer, #tag, #wire),));
                de.push(quote!(#gate Some(#wire) => Ok(#name::#id),));
                tags.push(quote!(#gate #name::#id => Some(#wire),));
            }
            Payload::Type(_) => {
                let ty = payload_ty(&v.payload);
                defs.push(quote!(#docs #gate #id(#ty),));
                ser.push(quote!(#gate #name::#id(payload) => serde_support::serialize_tagged(serializer, #tag, #wire, payload),));
                de.push(quote!(#gate Some(#wire) => serde_support::payload(&value, #tag).map(#name::#id),));
                tags.push(quote!(#gate #name::#id(_) => Some(#wire),));
            }
            Payload::Property { wire: prop, ty } => {
                let value = if ty.has_number() { quote!(&serde_support::Number(value)) } else { quote!(value) };
                let ty = rust_ty(ty);
                defs.push(quote!(#docs #gate #id(#ty),));
                ser.push(quote!(#gate #name::#id(value) => serde_support::serialize_tag_and_property(serializer, #tag, #wire, #prop, #value),));
                de.push(quote!(#gate Some(#wire) => serde_support::property(&value, #prop).map(#name::#id),));
                tags.push(quote!(#gate #name::#id(_) => Some(#wire),));
            }
        }
    }
    // The arms for an absent tag and for an unknown one.
    let (missing_tag, unknown_tag) = match &t.untagged_default {
        Some(d) => {
            let id = ident(&d.name);
            // Decoded without the tag, or with its own tag value; written without the tag.
            let own = match &d.wire {
                Some(w) => format!("absent or `\"{w}\"`"),
                None => "absent".to_owned(),
            };
            let own_tag = d.wire.as_ref().map(|w| quote!(| Some(#w)));
            let note = if d.takes_unknown_tags {
                format!(
                    "Decoded when `{tag}` is {own}, and when it has another value and the rest\n\
                     reads as this variant (that value is not kept; anything else is kept in `{other}`);\n\
                     written without `{tag}`."
                )
            } else {
                format!("Decoded when `{tag}` is {own} (another value is kept in `{other}`); written without `{tag}`.")
            };
            let docs = doc(Some(&match d.doc.as_deref() {
                Some(text) => format!("{text}\n\n{note}"),
                None => note,
            }));
            let decode = match &d.payload {
                Payload::Type(_) => {
                    let ty = payload_ty(&d.payload);
                    defs.push(quote!(#docs #id(#ty),));
                    ser.push(quote!(#name::#id(payload) => serde::Serialize::serialize(payload, serializer),));
                    tags.push(quote!(#name::#id(_) => None,));
                    Some((quote!(serde_support::payload), tag.as_str()))
                }
                Payload::Property { wire: prop, ty } => {
                    let value = if ty.has_number() { quote!(&serde_support::Number(value)) } else { quote!(value) };
                    let ty = rust_ty(ty);
                    defs.push(quote!(#docs #id(#ty),));
                    ser.push(
                        quote!(#name::#id(value) => serde_support::serialize_property(serializer, #prop, #value),),
                    );
                    tags.push(quote!(#name::#id(_) => None,));
                    Some((quote!(serde_support::property), prop.as_str()))
                }
                Payload::Unit => {
                    defs.push(quote!(#docs #id,));
                    ser.push(quote!(#name::#id => serde::Serialize::serialize(&serde_json::Map::new(), serializer),));
                    tags.push(quote!(#name::#id => None,));
                    None
                }
            };
            let missing = match &decode {
                Some((decode, key)) => quote!(None #own_tag => #decode(&value, #key).map(#name::#id),),
                None => quote!(None #own_tag => Ok(#name::#id),),
            };
            let unknown = match &decode {
                Some((decode, key)) if d.takes_unknown_tags => quote! {
                    Some(_) => Ok(match #decode::<_, serde_json::Error>(&value, #key) {
                        Ok(payload) => #name::#id(payload),
                        Err(_) => #name::#other(serde_support::UnknownVariant(value)),
                    }),
                },
                Some(_) | None => quote!(Some(_) => Ok(#name::#other(serde_support::UnknownVariant(value))),),
            };
            (missing, unknown)
        }
        None => (
            quote!(None => Err(serde::de::Error::missing_field(#tag)),),
            quote!(Some(_) => Ok(#name::#other(serde_support::UnknownVariant(value))),),
        ),
    };
    let tag_const_doc = format!(" The property that tells the variants of [`{name}`] apart.");
    let name_str = name.to_string();
    let schema_alternatives = t
        .variants
        .iter()
        .map(|v| (cfg(&v.gate), Some(v.wire.as_str()), &v.payload))
        .chain(t.untagged_default.iter().map(|d| (TokenStream::new(), None, &d.payload)))
        .map(|(gate, wire, payload)| {
            let tag_part = match wire {
                Some(w) => quote!("properties": { #tag: { "type": "string", "const": #w } }, "required": [#tag],),
                None => quote!(),
            };
            let body = match payload {
                Payload::Unit => quote!(schemars::json_schema!({ "type": "object", #tag_part })),
                Payload::Type(t) => {
                    let t = ident(t);
                    quote!(schemars::json_schema!({ "type": "object", #tag_part "allOf": [generator.subschema_for::<#t>()] }))
                }
                Payload::Property { wire: prop, ty } => {
                    let ty = rust_ty(ty);
                    quote! {{
                        let mut schema = schemars::json_schema!({ "type": "object", #tag_part });
                        let value = generator.subschema_for::<#ty>();
                        schema.ensure_object().entry("properties").or_insert_with(|| serde_json::json!({}))
                            .as_object_mut().map(|p| p.insert(#prop.to_owned(), value.to_value()));
                        schema
                    }}
                }
            };
            quote!(#gate alternatives.push(#body);)
        });
    quote! {
        #gate #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub enum #name {
            #(#defs)*
            /// A kind this version of the schema does not know, kept whole as received.
            #other(serde_support::UnknownVariant),
        }

        #gate impl #name {
            #[doc = #tag_const_doc]
            pub const TAG: &'static str = #tag;

            /// The value of the tag property, if this variant has one.
            pub fn tag(&self) -> Option<&str> {
                match self {
                    #(#tags)*
                    #name::#other(unknown) => unknown.tag(#tag),
                }
            }
        }

        #gate impl serde::Serialize for #name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self {
                    #(#ser)*
                    #name::#other(unknown) => serde::Serialize::serialize(unknown, serializer),
                }
            }
        }

        #gate impl<'de> serde::Deserialize<'de> for #name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                serde_support::union(deserializer, |value| match serde_support::tag_of(&value, #tag)? {
                    #(#de)*
                    #missing_tag
                    #unknown_tag
                })
            }
        }

        /// One alternative per known kind; decoding also keeps unknown ones.
        #[cfg(feature = "schemars")]
        #gate impl schemars::JsonSchema for #name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                #name_str.into()
            }
            fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                #[allow(unused_mut)]
                let mut alternatives: Vec<schemars::Schema> = Vec::new();
                #(#schema_alternatives)*
                schemars::json_schema!({ "oneOf": alternatives })
            }
        }
    }
}

fn untagged(gate: &TokenStream, name: &proc_macro2::Ident, vs: &[UntaggedVariant], all: &[Item]) -> TokenStream {
    let schemars = schemars_derive();
    // An integral `f64` is written as an integer (see `serde_support::JsonNumber`), so where an
    // integer alternative comes first it is what such a value decodes as.
    let integer_first = vs.iter().position(|v| matches!(&v.ty, Ty::Prim(p) if p.int_range().is_some()));
    let defs = vs.iter().enumerate().map(|(i, v)| {
        let id = ident(&v.name);
        let note = match (integer_first, &v.ty) {
            (Some(first), Ty::Prim(Prim::F64)) if first < i => {
                let integer = &vs[first].name;
                Some(format!(
                    "An integral value is written without a fraction, so it decodes again as [`{name}::{integer}`]."
                ))
            }
            _ => None,
        };
        let undescribed = match &v.ty {
            Ty::Prim(Prim::Null) => "`null` (the schema does not describe this alternative).".to_owned(),
            ty => format!("A `{}` (the schema does not describe this alternative).", rust_ty(ty)).replace(" :: ", "::"),
        };
        let text = match (v.doc.as_deref().unwrap_or(&undescribed), note) {
            (d, Some(n)) => format!("{d}\n\n{n}"),
            (d, None) => d.to_owned(),
        };
        let docs = doc(Some(&text));
        match &v.ty {
            Ty::Prim(Prim::Null) => quote!(#docs #id,),
            ty => {
                let number =
                    if ty.has_number() { quote!(#[serde(serialize_with = "serde_support::number")]) } else { quote!() };
                let ty = rust_ty(ty);
                quote!(#docs #number #id(#ty),)
            }
        }
    });
    // A union of object types stays open: a shape this version does not know is kept.
    let objects = vs.iter().all(|v| match &v.ty {
        Ty::Named(n) => all.iter().any(|i| &i.name == n && matches!(i.kind, ItemKind::Struct(_))),
        _ => false,
    });
    let fallback = if objects {
        let other = fallback_ident(vs.iter().map(|v| v.name.as_str()));
        quote! {
            /// A shape this version of the schema does not know, kept as received.
            #other(serde_json::Value),
        }
    } else {
        quote!()
    };
    quote! {
        #gate #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(untagged)]
        #schemars
        #[non_exhaustive]
        pub enum #name {
            #(#defs)*
            #fallback
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Methods: names, envelope enums, traits and dispatch.

/// Which envelope enum a method belongs to.
struct Direction {
    /// `ClientRequest`, ...: named after the sender, as in the schema.
    request: &'static str,
    response: &'static str,
    notification: &'static str,
    /// The handler trait (the receiving side).
    handler: &'static str,
    side: Side,
}

const DIRECTIONS: [Direction; 3] = [
    Direction {
        request: "ClientRequest",
        response: "AgentResponse",
        notification: "ClientNotification",
        handler: "Agent",
        side: Side::Agent,
    },
    Direction {
        request: "AgentRequest",
        response: "ClientResponse",
        notification: "AgentNotification",
        handler: "Client",
        side: Side::Client,
    },
    // Emitted only for a schema with proxy methods (the unstable schemas since proxy chains),
    // under the features of those methods.
    Direction {
        request: "ProxyRequest",
        response: "ProxyResponse",
        notification: "ProxyNotification",
        handler: "Proxy",
        side: Side::Proxy,
    },
];

/// The extension payload types (`ExtRequest`, ...), or any JSON value where the schema
/// predates them.
fn ext_types(model: &Model) -> [TokenStream; 3] {
    ["ExtRequest", "ExtResponse", "ExtNotification"].map(|name| {
        if model.items.iter().any(|i| i.name == name) {
            let id = ident(name);
            quote!(#id)
        } else {
            quote!(serde_json::Value)
        }
    })
}

/// The body of the `methods` module: the method-name constants, each direction's request,
/// response and notification enums with its handler trait, and `ProtocolLevelNotification`.
pub fn methods(model: &Model) -> TokenStream {
    let mut out = TokenStream::new();
    let ext = ext_types(model);
    out.extend(method_names(model));
    for dir in &DIRECTIONS {
        let methods: Vec<&Method> = model.methods.iter().filter(|m| m.side == dir.side).collect();
        let Some(gate) = direction_gate(dir, &methods) else { continue };
        out.extend(envelopes(model, dir, &methods, &ext, &gate));
        out.extend(handler_trait(model, dir, &methods, &ext, &gate));
    }
    out.extend(protocol_envelope(model));
    out
}

/// The `cfg` a direction's enums and trait are compiled under, `None` when the direction is not
/// emitted at all: the agent's and the client's always are, the proxy's only when the schema
/// has proxy methods, under the features of those methods.
fn direction_gate(dir: &Direction, methods: &[&Method]) -> Option<TokenStream> {
    if dir.side != Side::Proxy {
        return Some(TokenStream::new());
    }
    let gate = methods.iter().map(|m| m.gate.clone()).reduce(|a, b| a.union(&b))?;
    Some(cfg(&gate))
}

fn method_names(model: &Model) -> TokenStream {
    let mut out = TokenStream::new();
    for (module, side, doc_text) in [
        ("agent_method", Side::Agent, "Methods the agent handles (the client sends them)."),
        ("client_method", Side::Client, "Methods the client handles (the agent sends them)."),
        ("proxy_method", Side::Proxy, "Methods between a conductor and its proxies."),
    ] {
        let side_methods: Vec<&Method> = model.methods.iter().filter(|m| m.side == side).collect();
        let Some(module_gate) =
            DIRECTIONS.iter().find(|d| d.side == side).and_then(|d| direction_gate(d, &side_methods))
        else {
            continue;
        };
        let module = ident(module);
        let mut seen = std::collections::BTreeSet::new();
        let consts = model.methods.iter().filter(|m| m.side == side && seen.insert(m.name.clone())).map(|m| {
            let id = format_ident!("{}", screaming_snake(m.rust.trim_end_matches("_notification")));
            let gate = cfg(&m.gate);
            let name = &m.name;
            let d = format!(" `{name}`");
            quote!(#[doc = #d] #gate pub const #id: &str = #name;)
        });
        out.extend(quote! {
            #[doc = #doc_text]
            #module_gate
            pub mod #module {
                #(#consts)*
            }
        });
    }
    let protocol = model.protocol_methods.iter().map(|(name, _)| {
        let id = format_ident!("{}", screaming_snake(name));
        let d = format!(" `{name}`");
        quote!(#[doc = #d] pub const #id: &str = #name;)
    });
    out.extend(quote! {
        /// Protocol-level methods, handled by the connection itself.
        pub mod protocol_method {
            #(#protocol)*
        }
    });
    out
}

fn variant_ident(m: &Method) -> proc_macro2::Ident {
    ident(&pascal(&m.rust))
}

/// Decodes the params of a method from `params`: `null` reads as `{}` where the params are an
/// object, since JSON-RPC lets a message leave them out (the caller passes `null` then).
fn decode_params(model: &Model, params_ty: &str) -> TokenStream {
    let object = model.resolve(params_ty).is_some_and(|i| matches!(i.kind, ItemKind::Struct(_)));
    if object { quote!(serde_support::null_as_empty(params)) } else { quote!(serde::Deserialize::deserialize(params)) }
}

fn envelopes(
    model: &Model,
    dir: &Direction,
    methods: &[&Method],
    [ext_req, ext_resp, ext_notif]: &[TokenStream; 3],
    g: &TokenStream,
) -> TokenStream {
    let requests: Vec<&&Method> = methods.iter().filter(|m| m.is_request()).collect();
    let notifications: Vec<&&Method> = methods.iter().filter(|m| !m.is_request()).collect();
    let handler = dir.handler;

    let req = ident(dir.request);
    let req_doc = format!(" A request the {} handles, decoded by its method name.", handler.to_ascii_lowercase());
    let req_variants = requests.iter().map(|m| {
        let id = variant_ident(m);
        let p = ident(&m.params);
        let gate = cfg(&m.gate);
        let d = format!(" `{}`", m.name);
        quote!(#[doc = #d] #gate #id(#p),)
    });
    let req_methods = requests.iter().map(|m| {
        let id = variant_ident(m);
        let gate = cfg(&m.gate);
        let name = &m.name;
        quote!(#gate #req::#id(_) => #name,)
    });
    let req_decode = requests.iter().map(|m| {
        let id = variant_ident(m);
        let gate = cfg(&m.gate);
        let name = &m.name;
        let decode = decode_params(model, &m.params);
        quote!(#gate #name => #decode.map(#req::#id).map(Some),)
    });
    let req_ser = requests.iter().map(|m| {
        let id = variant_ident(m);
        let gate = cfg(&m.gate);
        quote!(#gate #req::#id(params) => serde::Serialize::serialize(params, serializer),)
    });

    let resp = ident(dir.response);
    let resp_doc = format!(
        " The result of a request the {} handled, decoded by the request's method name.",
        handler.to_ascii_lowercase()
    );
    let resp_variants = requests.iter().map(|m| {
        let id = variant_ident(m);
        let r = ident(m.response.as_deref().unwrap_or_default());
        let gate = cfg(&m.gate);
        let d = format!(" The result of `{}`.", m.name);
        quote!(#[doc = #d] #gate #id(#r),)
    });
    let resp_decode = requests.iter().map(|m| {
        let id = variant_ident(m);
        let gate = cfg(&m.gate);
        let name = &m.name;
        quote!(#gate #name => serde_support::null_as_empty(result).map(#resp::#id).map(Some),)
    });
    let resp_ser = requests.iter().map(|m| {
        let id = variant_ident(m);
        let gate = cfg(&m.gate);
        quote!(#gate #resp::#id(result) => serde::Serialize::serialize(result, serializer),)
    });

    let notif = ident(dir.notification);
    let notif_doc =
        format!(" A notification the {} handles, decoded by its method name.", handler.to_ascii_lowercase());
    let notif_variants = notifications.iter().map(|m| {
        let id = variant_ident(m);
        let p = ident(&m.params);
        let gate = cfg(&m.gate);
        let d = format!(" `{}`", m.name);
        quote!(#[doc = #d] #gate #id(#p),)
    });
    let notif_methods = notifications.iter().map(|m| {
        let id = variant_ident(m);
        let gate = cfg(&m.gate);
        let name = &m.name;
        quote!(#gate #notif::#id(_) => #name,)
    });
    let notif_decode = notifications.iter().map(|m| {
        let id = variant_ident(m);
        let gate = cfg(&m.gate);
        let name = &m.name;
        let decode = decode_params(model, &m.params);
        quote!(#gate #name => #decode.map(#notif::#id).map(Some),)
    });
    let notif_ser = notifications.iter().map(|m| {
        let id = variant_ident(m);
        let gate = cfg(&m.gate);
        quote!(#gate #notif::#id(params) => serde::Serialize::serialize(params, serializer),)
    });

    quote! {
        #g
        #[doc = #req_doc]
        ///
        /// Serialises as its params; [`Self::method`] gives the method name.
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub enum #req {
            #(#req_variants)*
            /// An extension method (its name starts with `_`).
            ExtMethod {
                /// The method name, as sent (with its leading `_`).
                method: String,
                /// The params, as free-form JSON.
                params: #ext_req,
            },
        }

        #g
        impl #req {
            /// The method name on the wire.
            pub fn method(&self) -> &str {
                match self {
                    #(#req_methods)*
                    #req::ExtMethod { method, .. } => method,
                }
            }

            /// Decodes the params of `method`; `Ok(None)` when the method is unknown. A message
            /// without params is decoded from `null`, which reads as `{}` where the params are an
            /// object.
            pub fn decode<'de, D: serde::Deserializer<'de>>(method: &str, params: D) -> Result<Option<Self>, D::Error> {
                match method {
                    #(#req_decode)*
                    ext if ext.starts_with('_') => serde::Deserialize::deserialize(params)
                        .map(|params| Some(#req::ExtMethod { method: ext.to_owned(), params })),
                    _ => Ok(None),
                }
            }
        }

        #g
        impl serde::Serialize for #req {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self {
                    #(#req_ser)*
                    #req::ExtMethod { params, .. } => serde::Serialize::serialize(params, serializer),
                }
            }
        }

        #g
        #[doc = #resp_doc]
        ///
        /// Serialises as the bare result.
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub enum #resp {
            #(#resp_variants)*
            /// The result of an extension method.
            ExtMethod(#ext_resp),
        }

        #g
        impl #resp {
            /// Decodes the result of a call to `method`; `Ok(None)` when the method is unknown.
            pub fn decode<'de, D: serde::Deserializer<'de>>(method: &str, result: D) -> Result<Option<Self>, D::Error> {
                match method {
                    #(#resp_decode)*
                    ext if ext.starts_with('_') => serde::Deserialize::deserialize(result).map(#resp::ExtMethod).map(Some),
                    _ => Ok(None),
                }
            }
        }

        #g
        impl serde::Serialize for #resp {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self {
                    #(#resp_ser)*
                    #resp::ExtMethod(result) => serde::Serialize::serialize(result, serializer),
                }
            }
        }

        #g
        #[doc = #notif_doc]
        ///
        /// Serialises as its params; [`Self::method`] gives the method name.
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub enum #notif {
            #(#notif_variants)*
            /// An extension notification (its name starts with `_`).
            ExtNotification {
                /// The notification's name, as sent (with its leading `_`).
                method: String,
                /// The params, as free-form JSON.
                params: #ext_notif,
            },
        }

        #g
        impl #notif {
            /// The method name on the wire.
            pub fn method(&self) -> &str {
                match self {
                    #(#notif_methods)*
                    #notif::ExtNotification { method, .. } => method,
                }
            }

            /// Decodes the params of `method`; `Ok(None)` when the method is unknown. A message
            /// without params is decoded from `null`, which reads as `{}` where the params are an
            /// object.
            pub fn decode<'de, D: serde::Deserializer<'de>>(method: &str, params: D) -> Result<Option<Self>, D::Error> {
                match method {
                    #(#notif_decode)*
                    ext if ext.starts_with('_') => serde::Deserialize::deserialize(params)
                        .map(|params| Some(#notif::ExtNotification { method: ext.to_owned(), params })),
                    _ => Ok(None),
                }
            }
        }

        #g
        impl serde::Serialize for #notif {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self {
                    #(#notif_ser)*
                    #notif::ExtNotification { params, .. } => serde::Serialize::serialize(params, serializer),
                }
            }
        }
    }
}

/// `value` (a `serde_json::Value` expression) as the `data` of an `Error`: the value itself
/// where `data` is any JSON, else the variant of the schema's data union that holds any JSON
/// (v2's `ErrorData::Other`).
fn error_data(model: &Model, value: TokenStream) -> TokenStream {
    let data_ty = model.resolve("Error").and_then(|error| match &error.kind {
        ItemKind::Struct(s) => s.fields.iter().find(|f| f.wire == "data").map(|f| &f.ty),
        _ => None,
    });
    let Some(Ty::Named(union)) = data_ty else { return value };
    match model.resolve(union).map(|i| &i.kind) {
        Some(ItemKind::Untagged(variants)) => match variants.iter().find(|v| v.ty == Ty::Value) {
            Some(any) => {
                let (union, variant) = (ident(union), ident(&any.name));
                quote!(#union::#variant(#value))
            }
            None => value,
        },
        _ => value,
    }
}

fn handler_trait(
    model: &Model,
    dir: &Direction,
    methods: &[&Method],
    [ext_req, ext_resp, ext_notif]: &[TokenStream; 3],
    g: &TokenStream,
) -> TokenStream {
    let trait_name = ident(dir.handler);
    let req = ident(dir.request);
    let resp = ident(dir.response);
    let notif = ident(dir.notification);
    let trait_doc = format!(
        " The {} side: one method per request and notification the {} sends.\n\n \
         `Cx` is the per-call context a runtime passes along (cancellation, the peer handle); \
         it is `()` when there is none. Methods outside the spec's baseline default to \
         \"method not found\" (requests) or do nothing (notifications).",
        dir.handler.to_ascii_lowercase(),
        dir.side.sender()
    );
    // The signatures, shared by the trait and the forwarding impls.
    let future = |output: TokenStream| quote!(impl std::future::Future<Output = Result<#output, Error>> + Send);
    let sigs: Vec<TokenStream> = methods
        .iter()
        .map(|m| {
            let f = ident(&m.rust);
            let p = ident(&m.params);
            let output = future(m.response.as_deref().map_or_else(|| quote!(()), |r| ident(r).into_token_stream()));
            quote!(fn #f(&self, params: #p, cx: Cx) -> #output)
        })
        .collect();
    let fns = methods.iter().zip(&sigs).map(|(m, sig)| {
        let docs = doc(gated_doc(m.doc.as_deref(), &m.gate).as_deref());
        let gate = cfg(&m.gate);
        let wire = format!(" Method: `{}`.", m.name);
        let default = match (&m.response, m.baseline) {
            (_, true) => return quote!(#docs #[doc = ""] #[doc = #wire] #gate #sig;),
            (Some(_), false) => {
                let name = &m.name;
                let data = error_data(model, quote!(serde_json::Value::from(#name)));
                quote!(std::future::ready(Err(Error::method_not_found().data(#data))))
            }
            (None, false) => quote!(std::future::ready(Ok(()))),
        };
        quote! {
            #docs #[doc = ""] #[doc = #wire] #gate
            #sig {
                let _ = (params, cx);
                #default
            }
        }
    });
    let ext_data = error_data(model, quote!(serde_json::Value::from(method)));
    let output = future(ext_resp.clone());
    let ext_method = quote!(fn ext_method(&self, method: &str, params: #ext_req, cx: Cx) -> #output);
    let output = future(quote!(()));
    let ext_notification = quote!(fn ext_notification(&self, method: &str, params: #ext_notif, cx: Cx) -> #output);
    // Every method of the trait: its gate, signature, and the call that forwards it.
    let forwarded: Vec<(TokenStream, &TokenStream, TokenStream)> = methods
        .iter()
        .zip(&sigs)
        .map(|(m, sig)| {
            let f = ident(&m.rust);
            (cfg(&m.gate), sig, quote!(#f(params, cx)))
        })
        .chain([
            (TokenStream::new(), &ext_method, quote!(ext_method(method, params, cx))),
            (TokenStream::new(), &ext_notification, quote!(ext_notification(method, params, cx))),
        ])
        .collect();
    let forwarding = forwarding_impls(dir, &forwarded, g);
    let req_arms = methods.iter().filter(|m| m.is_request()).map(|m| {
        let id = variant_ident(m);
        let f = ident(&m.rust);
        let gate = cfg(&m.gate);
        quote!(#gate #req::#id(params) => handler.#f(params, cx).await.map(#resp::#id),)
    });
    let notif_arms = methods.iter().filter(|m| !m.is_request()).map(|m| {
        let id = variant_ident(m);
        let f = ident(&m.rust);
        let gate = cfg(&m.gate);
        quote!(#gate #notif::#id(params) => handler.#f(params, cx).await,)
    });
    let dispatch_doc = format!(" Calls the [`{}`] method this request is for.", dir.handler);
    let dispatch_notif_doc = format!(" Calls the [`{}`] method this notification is for.", dir.handler);
    quote! {
        #g
        #[doc = #trait_doc]
        pub trait #trait_name<Cx: Send = ()>: Send + Sync {
            #(#fns)*

            /// An extension request (a method name starting with `_`).
            #ext_method {
                let _ = (params, cx);
                std::future::ready(Err(Error::method_not_found().data(#ext_data)))
            }

            /// An extension notification (a method name starting with `_`); ignored by default.
            #ext_notification {
                let _ = (method, params, cx);
                std::future::ready(Ok(()))
            }
        }

        #forwarding

        #g
        impl #req {
            #[doc = #dispatch_doc]
            pub async fn dispatch<H: #trait_name<Cx>, Cx: Send>(self, handler: &H, cx: Cx) -> Result<#resp, Error> {
                match self {
                    #(#req_arms)*
                    #req::ExtMethod { method, params } => handler.ext_method(&method, params, cx).await.map(#resp::ExtMethod),
                }
            }
        }

        #g
        impl #notif {
            #[doc = #dispatch_notif_doc]
            pub async fn dispatch<H: #trait_name<Cx>, Cx: Send>(self, handler: &H, cx: Cx) -> Result<(), Error> {
                match self {
                    #(#notif_arms)*
                    #notif::ExtNotification { method, params } => handler.ext_notification(&method, params, cx).await,
                }
            }
        }
    }
}

/// `Arc<T>` and `Box<T>` are handlers wherever `T` is: each method (its gate, signature and
/// call in `forwarded`) goes to the `T` inside. A runtime owns what it serves; with these, the
/// caller can keep a clone of an `Arc` to the handler's state.
fn forwarding_impls(
    dir: &Direction,
    forwarded: &[(TokenStream, &TokenStream, TokenStream)],
    g: &TokenStream,
) -> TokenStream {
    let trait_name = ident(dir.handler);
    let side = dir.handler.to_ascii_lowercase();
    let fns: Vec<TokenStream> =
        forwarded.iter().map(|(gate, sig, call)| quote!(#gate #sig { (**self).#call })).collect();
    let wrappers = [
        (
            quote!(std::sync::Arc<T>),
            format!(
                "The {side} behind an `Arc`, with every method forwarded to it: serve an `Arc` and keep a\n\
                 clone of it to reach the {side}'s state."
            ),
        ),
        (quote!(Box<T>), format!("The boxed {side}, with every method forwarded to it.")),
    ];
    wrappers
        .iter()
        .map(|(wrapper, text)| {
            let doc = doc(Some(text));
            quote! {
                #doc
                #g
                impl<Cx: Send, T: #trait_name<Cx> + ?Sized> #trait_name<Cx> for #wrapper {
                    #(#fns)*
                }
            }
        })
        .collect()
}

/// `ProtocolLevelNotification`: `$/cancel_request` and any later `$/` method.
fn protocol_envelope(model: &Model) -> TokenStream {
    // A protocol method is compiled with its params type.
    let gate_of =
        |params: &str| cfg(&model.items.iter().find(|i| i.name == params).map(|i| i.gate.clone()).unwrap_or_default());
    let variants = model.protocol_methods.iter().map(|(name, params)| {
        let id = ident(&pascal(&snake(name)));
        let p = ident(params);
        let d = format!(" `{name}`");
        let gate = gate_of(params);
        quote!(#[doc = #d] #gate #id(#p),)
    });
    let decode = model.protocol_methods.iter().map(|(name, params_ty)| {
        let id = ident(&pascal(&snake(name)));
        let gate = gate_of(params_ty);
        let decode = decode_params(model, params_ty);
        quote!(#gate #name => #decode.map(ProtocolLevelNotification::#id).map(Some),)
    });
    let methods = model.protocol_methods.iter().map(|(name, params)| {
        let id = ident(&pascal(&snake(name)));
        let gate = gate_of(params);
        quote!(#gate ProtocolLevelNotification::#id(_) => #name,)
    });
    let ser = model.protocol_methods.iter().map(|(name, params)| {
        let id = ident(&pascal(&snake(name)));
        let gate = gate_of(params);
        quote!(#gate ProtocolLevelNotification::#id(ref params) => serde::Serialize::serialize(params, serializer),)
    });
    quote! {
        /// A protocol-level notification (`$/...`), which either side may send.
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub enum ProtocolLevelNotification {
            #(#variants)*
        }

        impl ProtocolLevelNotification {
            /// The method name on the wire.
            pub fn method(&self) -> &str {
                match *self {
                    #(#methods)*
                }
            }

            /// Decodes the params of `method`; `Ok(None)` when the method is unknown. A message
            /// without params is decoded from `null`, which reads as `{}` where the params are an
            /// object.
            #[allow(unused_variables)]
            pub fn decode<'de, D: serde::Deserializer<'de>>(method: &str, params: D) -> Result<Option<Self>, D::Error> {
                match method {
                    #(#decode)*
                    _ => Ok(None),
                }
            }
        }

        impl serde::Serialize for ProtocolLevelNotification {
            #[allow(unused_variables)]
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match *self {
                    #(#ser)*
                }
            }
        }
    }
}

/// The name a constructor parameter binds (`None` for patterns that are not one name).
fn param_name(param: &syn::FnArg) -> Option<String> {
    match param {
        syn::FnArg::Typed(typed) => match &*typed.pat {
            syn::Pat::Ident(ident) => Some(ident.ident.to_string()),
            _ => None,
        },
        syn::FnArg::Receiver(_) => None,
    }
}
