//! `cargo xtask vendor --derive`: extra derives on the vendored types.
//!
//! A derive whose impl needs every field to implement the trait (`Eq`, `Hash`, `PartialOrd`,
//! `Ord`) goes only on the types whose fields all do, worked out over the whole file: a
//! `NumberPropertySchema` holds an `f64`, so it has no `Eq`, and neither has a type holding it.
//! Deriving it there anyway could only fail to compile, and a user asking for `Eq` wants it
//! wherever the protocol allows it. Derives this module knows nothing about (a project's own,
//! such as `my_crate::MyTrait`) go on every type: what they need is theirs to decide. Derives
//! that cannot work on these types (`Default`, `Copy`, serde's, implemented by hand) are errors.

use std::collections::{BTreeMap, BTreeSet};

use quote::quote;
use syn::punctuated::Punctuated;

use super::{CodegenError, Result};

/// A derive that holds only when every field implements the trait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Structural {
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
}

impl Structural {
    fn of(name: &str) -> Option<Self> {
        Some(match name {
            "PartialEq" => Structural::PartialEq,
            "Eq" => Structural::Eq,
            "PartialOrd" => Structural::PartialOrd,
            "Ord" => Structural::Ord,
            "Hash" => Structural::Hash,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Structural::PartialEq => "PartialEq",
            Structural::Eq => "Eq",
            Structural::PartialOrd => "PartialOrd",
            Structural::Ord => "Ord",
            Structural::Hash => "Hash",
        }
    }

    /// The supertraits a derive of `self` needs on the type itself.
    fn requires(self) -> &'static [Structural] {
        match self {
            Structural::PartialEq | Structural::Hash => &[],
            Structural::Eq | Structural::PartialOrd => &[Structural::PartialEq],
            Structural::Ord => &[Structural::Eq, Structural::PartialOrd],
        }
    }
}

/// Why a derive cannot be asked for, or `None` when it can.
fn refused(name: &str) -> Option<&'static str> {
    Some(match name {
        "Default" => {
            "the types derive `Default` where the schema allows it (enums and types with required fields cannot)"
        }
        "Copy" => "the types hold `String`s and `Vec`s, which are not `Copy`",
        "Serialize" | "Deserialize" => "the types already implement serde's traits, partly by hand",
        _ => return None,
    })
}

/// Derives of the standard library and serde: asking for one of them spelled in another case
/// (`eq`) is a mistake, not a project's own derive.
const STANDARD: [&str; 11] =
    ["Debug", "Clone", "Copy", "PartialEq", "Eq", "PartialOrd", "Ord", "Hash", "Default", "Serialize", "Deserialize"];

/// What [`add`] did: a short line per derive, the same with every type left out (for the
/// file's preamble), and warnings (a derive that reached no type).
#[derive(Debug, Default)]
pub struct Added {
    pub notes: Vec<String>,
    pub preamble: Vec<String>,
    pub warnings: Vec<String>,
}

/// One type of the vendored file that derives can be added to.
struct Target {
    /// Derives it has, by last path segment.
    has: BTreeSet<String>,
    fields: Vec<syn::Type>,
}

/// Adds `derives` to the types in `items` (and to the serde helper types they hold, such as
/// `UnknownVariant`); says where each went.
pub fn add(items: &mut [syn::Item], derives: &[syn::Path]) -> Result<Added> {
    let mut wanted: Vec<(String, &syn::Path)> = Vec::new();
    for path in derives {
        let name = last_segment(path);
        if let Some(std) = STANDARD.iter().find(|s| s.eq_ignore_ascii_case(&name) && **s != name) {
            return Err(CodegenError::table(&format!("--derive {name}: no such derive; did you mean `{std}`?")));
        }
        if let Some(why) = refused(&name) {
            return Err(CodegenError::table(&format!("--derive {name}: not supported: {why}")));
        }
        if !wanted.iter().any(|(n, _)| *n == name) {
            wanted.push((name, path));
        }
    }
    if wanted.is_empty() {
        return Ok(Added::default());
    }

    let mut targets = BTreeMap::new();
    collect(items, &mut targets, false);
    // Which types get each structural derive: the largest set closed under "every field
    // implements it", so recursive types (a content block holding content blocks) qualify.
    // Ordered so that `Eq` and `PartialOrd` are settled before `Ord`, which needs both.
    let mut structural: Vec<Structural> = wanted.iter().filter_map(|(n, _)| Structural::of(n)).collect();
    structural.sort();
    let mut grant: BTreeMap<Structural, BTreeSet<String>> = BTreeMap::new();
    for &trait_ in &structural {
        let has = |name: &str, t: Structural, grant: &BTreeMap<Structural, BTreeSet<String>>| {
            targets.get(name).is_some_and(|target: &Target| target.has.contains(t.name()))
                || grant.get(&t).is_some_and(|set| set.contains(name))
        };
        let mut set: BTreeSet<String> =
            targets.keys().filter(|name| trait_.requires().iter().all(|&r| has(name, r, &grant))).cloned().collect();
        loop {
            let before = set.len();
            let current = set.clone();
            set.retain(|name| {
                targets[name]
                    .fields
                    .iter()
                    .all(|ty| implements(ty, trait_, &|n| current.contains(n) || has(n, trait_, &grant)))
            });
            if set.len() == before {
                break;
            }
        }
        grant.insert(trait_, set);
    }

    let mut added = Added::default();
    for (name, path) in &wanted {
        let (on, off): (Vec<&String>, Vec<&String>) = match Structural::of(name) {
            Some(t) => targets
                .iter()
                .filter(|(_, target)| !target.has.contains(name.as_str()))
                .map(|(n, _)| n)
                .partition(|n| grant[&t].contains(*n)),
            None => (targets.iter().filter(|(_, t)| !t.has.contains(name.as_str())).map(|(n, _)| n).collect(), vec![]),
        };
        let already = targets.values().filter(|t| t.has.contains(name.as_str())).count();
        let shown = quote!(#path).to_string().replace(' ', "");
        let mut note = format!("derive `{shown}`: added to {} types", on.len());
        if already > 0 {
            note.push_str(&format!(", {already} had it"));
        }
        let mut full = note.clone();
        if !off.is_empty() {
            let first: Vec<&str> = off.iter().take(5).map(|s| s.as_str()).collect();
            let more = if off.len() > first.len() { ", ..." } else { "" };
            let why = format!("; left off {} whose fields do not all implement it", off.len());
            note.push_str(&format!("{why} ({}{more})", first.join(", ")));
            let all: Vec<&str> = off.iter().map(|s| s.as_str()).collect();
            full.push_str(&format!("{why}: {}", all.join(", ")));
        }
        if on.is_empty() {
            added.warnings.push(format!("--derive {shown} was added to no type"));
        }
        added.notes.push(note);
        added.preamble.push(full);
    }
    let add_to = |type_name: &str| -> Vec<syn::Path> {
        let target = &targets[type_name];
        wanted
            .iter()
            .filter(|(name, _)| !target.has.contains(name.as_str()))
            .filter(|(name, _)| Structural::of(name).is_none_or(|t| grant[&t].contains(type_name)))
            .map(|(_, path)| (*path).clone())
            .collect()
    };
    apply(items, &add_to, false)?;
    Ok(added)
}

fn last_segment(path: &syn::Path) -> String {
    path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default()
}

/// The derive paths of one `#[derive(..)]`.
fn derive_list(attr: &syn::Attribute) -> Result<Punctuated<syn::Path, syn::Token![,]>> {
    attr.parse_args_with(Punctuated::parse_terminated)
        .map_err(|e| CodegenError::Emit { file: "vendor".into(), message: format!("derive list: {e}") })
}

/// The types derives go on: every non-generic struct and enum at the top level and in the
/// `serde_support` module (`UnknownVariant`, which the unions hold for unknown variants).
fn collect(items: &[syn::Item], targets: &mut BTreeMap<String, Target>, nested: bool) {
    for item in items {
        let (ident, generics, attrs, fields): (_, _, _, Vec<syn::Type>) = match item {
            syn::Item::Struct(s) => (&s.ident, &s.generics, &s.attrs, s.fields.iter().map(|f| f.ty.clone()).collect()),
            syn::Item::Enum(e) => (
                &e.ident,
                &e.generics,
                &e.attrs,
                e.variants.iter().flat_map(|v| v.fields.iter().map(|f| f.ty.clone())).collect(),
            ),
            syn::Item::Mod(syn::ItemMod { ident, content: Some((_, inner)), .. })
                if !nested && ident == "serde_support" =>
            {
                collect(inner, targets, true);
                continue;
            }
            _ => continue,
        };
        if !generics.params.is_empty() {
            continue;
        }
        let has = attrs
            .iter()
            .filter(|a| a.path().is_ident("derive"))
            .filter_map(|a| derive_list(a).ok())
            .flat_map(|list| list.into_iter().map(|p| last_segment(&p)).collect::<Vec<_>>())
            .collect();
        targets.insert(ident.to_string(), Target { has, fields });
    }
}

/// Whether a field type implements `t`, given which of the file's own types do (`local`).
/// Anything not known here counts as not implementing it, so a derive is never emitted where
/// it would not compile.
fn implements(ty: &syn::Type, t: Structural, local: &dyn Fn(&str) -> bool) -> bool {
    match ty {
        syn::Type::Path(p) if p.qself.is_none() => {
            let segments: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
            let args: Vec<&syn::Type> = match &p.path.segments.last().map(|s| &s.arguments) {
                Some(syn::PathArguments::AngleBracketed(a)) => a
                    .args
                    .iter()
                    .filter_map(|a| match a {
                        syn::GenericArgument::Type(t) => Some(t),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let all_args = || args.iter().all(|a| implements(a, t, local));
            let joined = segments.join("::");
            let name = joined.trim_start_matches("std::").trim_start_matches("alloc::");
            let eq_hash = matches!(t, Structural::PartialEq | Structural::Eq | Structural::Hash);
            match name {
                "bool" | "char" | "str" | "String" | "string::String" | "i8" | "i16" | "i32" | "i64" | "i128"
                | "isize" | "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => true,
                "f32" | "f64" => matches!(t, Structural::PartialEq | Structural::PartialOrd),
                "Option"
                | "option::Option"
                | "Vec"
                | "vec::Vec"
                | "Box"
                | "boxed::Box"
                | "sync::Arc"
                | "BTreeMap"
                | "collections::BTreeMap"
                | "BTreeSet"
                | "collections::BTreeSet" => all_args(),
                "HashMap" | "collections::HashMap" => t != Structural::Hash && eq_hash && all_args(),
                // serde_json's `Value`, `Number` and `Map<String, Value>` are `Eq` and `Hash`
                // (floats inside are never NaN), but not ordered; `Value` and `Map` are what
                // `serde_support` imports them as.
                "serde_json::Value" | "serde_json::Number" | "Value" => eq_hash,
                "serde_json::Map" | "Map" => eq_hash && all_args(),
                // Hand-written in `serde_support` with `PartialEq`, `Eq` and `Hash` impls.
                "serde_support::OrderedMap" | "OrderedMap" => eq_hash && all_args(),
                _ => {
                    let local_name = match segments.as_slice() {
                        [one] => Some(one.as_str()),
                        [module, one] if module == "serde_support" => Some(one.as_str()),
                        _ => None,
                    };
                    args.is_empty() && local_name.is_some_and(local)
                }
            }
        }
        syn::Type::Reference(r) => implements(&r.elem, t, local),
        syn::Type::Paren(p) => implements(&p.elem, t, local),
        syn::Type::Array(a) => implements(&a.elem, t, local),
        syn::Type::Slice(s) => implements(&s.elem, t, local),
        syn::Type::Tuple(tuple) => tuple.elems.iter().all(|e| implements(e, t, local)),
        _ => false,
    }
}

/// Rewrites the derive lists: the existing derives are kept as they are, the new ones appended
/// after them (whatever trailing comma the list had).
fn apply(items: &mut [syn::Item], add_to: &dyn Fn(&str) -> Vec<syn::Path>, nested: bool) -> Result<()> {
    for item in items {
        let (ident, generics, attrs) = match item {
            syn::Item::Struct(s) => (&s.ident, &s.generics, &mut s.attrs),
            syn::Item::Enum(e) => (&e.ident, &e.generics, &mut e.attrs),
            syn::Item::Mod(syn::ItemMod { ident, content: Some((_, inner)), .. })
                if !nested && ident == "serde_support" =>
            {
                apply(inner, add_to, true)?;
                continue;
            }
            _ => continue,
        };
        if !generics.params.is_empty() {
            continue;
        }
        let extra = add_to(&ident.to_string());
        if extra.is_empty() {
            continue;
        }
        match attrs.iter_mut().find(|a| a.path().is_ident("derive")) {
            Some(attr) => {
                let mut list = derive_list(attr)?;
                list.extend(extra);
                attr.meta = syn::parse_quote!(derive(#list));
            }
            None => attrs.insert(0, syn::parse_quote!(#[derive(#(#extra),*)])),
        }
    }
    Ok(())
}
