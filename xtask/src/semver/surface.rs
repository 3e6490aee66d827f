//! The public API of a generated crate, read from its source: every file the generator wrote is
//! parsed with `syn`, `#[cfg(feature = ..)]` is evaluated for a set of features, and each public
//! item that a user can name is listed with its signature: modules, types, fields, variants,
//! inherent functions, trait methods, constants, trait impls (derived ones included),
//! re-exports and exported macros. `#[doc(hidden)]` items are left out, as cargo-semver-checks
//! leaves them out.
//!
//! This knows the shape of what the generator emits (modules in `src/NAME.rs` or
//! `src/NAME/mod.rs`, a private module glob-re-exported by its parent, `deserialize_struct!`
//! standing for a `Deserialize` impl); it is not a general Rust API reader.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use quote::ToTokens;
use syn::punctuated::Punctuated;

use crate::codegen::OutputFile;

/// Which names an item lives among: a field and a setter of the same name are two items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Namespace {
    /// Modules.
    Module,
    /// Structs, enums, traits, type aliases.
    Type,
    /// Public struct fields.
    Field,
    /// Enum variants, their fields part of the signature.
    Variant,
    /// Free functions and inherent associated functions (`Type::new`, setters).
    Function,
    /// A method of a public trait.
    TraitMethod,
    /// Constants and statics, free or associated.
    Const,
    /// `impl Trait for Type`, derived or written out.
    Impl,
    /// `pub use path::Name`.
    ReExport,
    /// `#[macro_export]` macros.
    Macro,
}

impl Namespace {
    /// How the item is named in a report line.
    pub fn noun(self) -> &'static str {
        match self {
            Namespace::Module => "module",
            Namespace::Type => "type",
            Namespace::Field => "field",
            Namespace::Variant => "variant",
            Namespace::Function => "fn",
            Namespace::TraitMethod => "trait method",
            Namespace::Const => "const",
            Namespace::Impl => "impl",
            Namespace::ReExport => "re-export",
            Namespace::Macro => "macro",
        }
    }
}

/// One public item: what it looks like to a user, and what its container promises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiItem {
    /// The declaration without its body: `struct PromptRequest`, `Vec<ContentBlock>` (a field),
    /// `fn new(session_id: impl Into<SessionId>) -> Self`.
    pub signature: String,
    /// For a struct or an enum: whether it is exhaustive, i.e. whether users may build the
    /// struct with a literal (no `#[non_exhaustive]`, every field public) or match the enum
    /// without a wildcard (no `#[non_exhaustive]`).
    pub exhaustive: Option<bool>,
    /// For a trait method: whether it has a default body.
    pub provided: Option<bool>,
    /// For a field, variant or trait method: the path of its type or trait.
    pub parent: Option<String>,
}

/// Every public item of a crate, by namespace and path (`AgentCapabilities::load_session`;
/// paths are relative to the crate root).
pub type Surface = BTreeMap<(Namespace, String), ApiItem>;

/// The Rust files of a generated crate, parsed once for every feature set they are read with.
pub struct Parsed {
    files: BTreeMap<PathBuf, syn::File>,
}

impl Parsed {
    /// Parses the `.rs` files among `files`; the error names the one that does not parse.
    pub fn new(files: &[OutputFile]) -> Result<Parsed, String> {
        let files = files
            .iter()
            .filter(|f| f.path.extension().is_some_and(|e| e == "rs"))
            .map(|f| {
                let file =
                    syn::parse_file(&f.contents).map_err(|e| format!("{} does not parse: {e}", f.path.display()))?;
                Ok((f.path.clone(), file))
            })
            .collect::<Result<_, String>>()?;
        Ok(Parsed { files })
    }
}

/// The public items of a generated crate when compiled with `features`.
pub fn surface(parsed: &Parsed, features: &BTreeSet<String>) -> Result<Surface, String> {
    let mut walker = Walker { features, parsed, out: Surface::new(), impls: Vec::new() };
    walker.file(Path::new("src/lib.rs"), "")?;
    walker.resolve_impls();
    Ok(walker.out)
}

/// The cargo features a crate's `Cargo.toml` declares (besides `default`).
pub fn declared_features(files: &[OutputFile]) -> Vec<String> {
    let Some(manifest) = files.iter().find(|f| f.path == Path::new("Cargo.toml")) else { return Vec::new() };
    let mut in_features = false;
    let mut out = Vec::new();
    for line in manifest.contents.lines().map(str::trim) {
        if line.starts_with('[') {
            in_features = line == "[features]";
        } else if in_features
            && let Some((name, _)) = line.split_once('=')
            && !line.starts_with('#')
        {
            let name = name.trim();
            if name != "default" {
                out.push(name.to_owned());
            }
        }
    }
    out
}

/// The features cargo-semver-checks enables by default: every feature but those it considers
/// unstable or internal (`unstable`, `nightly`, `bench`, `no_std`, and names starting with
/// `_`, `unstable_`, `unstable-`). Their items carry no semver promise.
pub fn checked_features(declared: &[String]) -> BTreeSet<String> {
    declared
        .iter()
        .filter(|f| {
            !matches!(f.as_str(), "unstable" | "nightly" | "bench" | "no_std")
                && !f.starts_with('_')
                && !f.starts_with("unstable_")
                && !f.starts_with("unstable-")
        })
        .cloned()
        .collect()
}

/// A trait impl seen while walking, kept until every public type and trait is known: an impl
/// is API when its type or its trait is.
struct PendingImpl {
    module: String,
    trait_key: String,
    /// The trait's own name (`Agent` of `Agent<Cx>`).
    trait_name: String,
    self_text: String,
    /// The type's own name (`Error` of `Error`, `Arc` of `std::sync::Arc<T>`).
    self_name: String,
}

struct Walker<'a> {
    features: &'a BTreeSet<String>,
    parsed: &'a Parsed,
    out: Surface,
    impls: Vec<PendingImpl>,
}

/// `a::b` + `c` → `a::b::c`.
fn join(module: &str, name: &str) -> String {
    if module.is_empty() { name.to_owned() } else { format!("{module}::{name}") }
}

impl Walker<'_> {
    fn file(&mut self, path: &Path, module: &str) -> Result<(), String> {
        let parsed = self.parsed;
        let file = parsed.files.get(path).ok_or_else(|| format!("the generated crate has no {}", path.display()))?;
        let dir = if path.file_name().is_some_and(|n| n == "lib.rs" || n == "mod.rs") {
            path.parent().map(Path::to_owned).unwrap_or_default()
        } else {
            path.with_extension("")
        };
        self.items(&file.items, module, Some(&dir))
    }

    /// The file of `mod name;` declared in a module whose files live in `dir`.
    fn module_file(&self, dir: &Path, name: &str) -> Result<PathBuf, String> {
        let candidates = [dir.join(format!("{name}.rs")), dir.join(name).join("mod.rs")];
        candidates
            .iter()
            .find(|p| self.parsed.files.contains_key(p.as_path()))
            .cloned()
            .ok_or_else(|| format!("module `{name}` declared in {} has no file in the generated crate", dir.display()))
    }

    fn items(&mut self, items: &[syn::Item], module: &str, dir: Option<&Path>) -> Result<(), String> {
        // A child module whose items the parent re-exports with `pub use child::*` is walked
        // under the parent's path: users name them there (`acp_types::PromptRequest`, not
        // `acp_types::v1::PromptRequest`).
        let globbed: BTreeSet<String> = items
            .iter()
            .filter_map(|item| match item {
                syn::Item::Use(u) if is_pub(&u.vis) && self.on(&u.attrs) => glob_of(&u.tree),
                _ => None,
            })
            .collect();
        for item in items {
            match item {
                syn::Item::Mod(m) => {
                    if !self.on(&m.attrs) || hidden(&m.attrs) {
                        continue;
                    }
                    let name = m.ident.to_string();
                    if is_pub(&m.vis) {
                        self.add(Namespace::Module, join(module, &name), plain(format!("mod {name}")));
                    }
                    let child = if globbed.contains(&name) {
                        module.to_owned()
                    } else if is_pub(&m.vis) {
                        join(module, &name)
                    } else {
                        continue;
                    };
                    match (&m.content, dir) {
                        (Some((_, inner)), _) => self.items(inner, &child, None)?,
                        (None, Some(dir)) => {
                            let file = self.module_file(dir, &name)?;
                            self.file(&file, &child)?;
                        }
                        (None, None) => return Err(format!("`mod {name};` inside an inline module")),
                    }
                }
                _ if !self.on(item_attrs(item)) || hidden(item_attrs(item)) => {}
                syn::Item::Struct(s) if is_pub(&s.vis) => self.structure(s, module),
                syn::Item::Enum(e) if is_pub(&e.vis) => self.enumeration(e, module),
                syn::Item::Trait(t) if is_pub(&t.vis) => self.trait_def(t, module),
                syn::Item::Type(t) if is_pub(&t.vis) => {
                    let name = t.ident.to_string();
                    let sig = format!("type {name}{} = {}", text(&t.generics), text(&t.ty));
                    self.add(Namespace::Type, join(module, &name), plain(sig));
                }
                syn::Item::Fn(f) if is_pub(&f.vis) => {
                    let sig = self.signature(&f.sig);
                    self.add(Namespace::Function, join(module, &f.sig.ident.to_string()), plain(sig));
                }
                syn::Item::Const(c) if is_pub(&c.vis) => {
                    let sig = format!("const {}: {}", c.ident, text(&c.ty));
                    self.add(Namespace::Const, join(module, &c.ident.to_string()), plain(sig));
                }
                syn::Item::Static(s) if is_pub(&s.vis) => {
                    let sig = format!("static {}: {}", s.ident, text(&s.ty));
                    self.add(Namespace::Const, join(module, &s.ident.to_string()), plain(sig));
                }
                syn::Item::Use(u) if is_pub(&u.vis) => self.reexports(&u.tree, module, ""),
                syn::Item::Impl(i) => self.implementation(i, module),
                syn::Item::Macro(m) => self.item_macro(m, module),
                _ => {}
            }
        }
        Ok(())
    }

    fn add(&mut self, ns: Namespace, path: String, item: ApiItem) {
        self.out.insert((ns, path), item);
    }

    /// Whether every `#[cfg(..)]` of `attrs` holds with the walker's features.
    fn on(&self, attrs: &[syn::Attribute]) -> bool {
        attrs.iter().filter(|a| a.path().is_ident("cfg")).all(|a| match a.parse_args::<syn::Meta>() {
            Ok(meta) => cfg_holds(&meta, self.features),
            Err(_) => false,
        })
    }

    /// The derives of `attrs`, those under a `cfg_attr` that holds included.
    fn derives(&self, attrs: &[syn::Attribute]) -> Vec<String> {
        let mut out = Vec::new();
        for attr in attrs {
            let paths = if attr.path().is_ident("derive") {
                derive_paths(&attr.meta)
            } else if attr.path().is_ident("cfg_attr") {
                let Ok(args) = attr.parse_args_with(Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated) else {
                    continue;
                };
                let mut args = args.into_iter();
                match args.next() {
                    Some(predicate) if cfg_holds(&predicate, self.features) => {
                        args.filter(|m| m.path().is_ident("derive")).flat_map(|m| derive_paths(&m)).collect()
                    }
                    _ => Vec::new(),
                }
            } else {
                Vec::new()
            };
            out.extend(paths.iter().map(last_segment));
        }
        out
    }

    fn structure(&mut self, s: &syn::ItemStruct, module: &str) {
        let name = s.ident.to_string();
        let path = join(module, &name);
        // Users can build it with a literal only when nothing is hidden from them.
        let exhaustive = !s.attrs.iter().any(|a| a.path().is_ident("non_exhaustive"))
            && s.fields.iter().filter(|f| self.on(&f.attrs)).all(|f| is_pub(&f.vis) && !hidden(&f.attrs));
        let sig = format!("struct {name}{}", text(&s.generics));
        self.add(Namespace::Type, path.clone(), ApiItem { exhaustive: Some(exhaustive), ..plain(sig) });
        for (index, field) in s.fields.iter().enumerate() {
            if !is_pub(&field.vis) || !self.on(&field.attrs) || hidden(&field.attrs) {
                continue;
            }
            let field_name = field.ident.as_ref().map_or_else(|| index.to_string(), |i| unraw(&i.to_string()));
            let item = ApiItem { parent: Some(path.clone()), ..plain(text(&field.ty)) };
            self.add(Namespace::Field, join(&path, &field_name), item);
        }
        self.derived_impls(&s.attrs, &name, &s.generics, module);
    }

    fn enumeration(&mut self, e: &syn::ItemEnum, module: &str) {
        let name = e.ident.to_string();
        let path = join(module, &name);
        let exhaustive = !e.attrs.iter().any(|a| a.path().is_ident("non_exhaustive"));
        let sig = format!("enum {name}{}", text(&e.generics));
        self.add(Namespace::Type, path.clone(), ApiItem { exhaustive: Some(exhaustive), ..plain(sig) });
        for v in &e.variants {
            if !self.on(&v.attrs) || hidden(&v.attrs) {
                continue;
            }
            let mut fields = v.fields.clone();
            let kept: Vec<syn::Field> = fields.iter().filter(|f| self.on(&f.attrs)).cloned().collect();
            match &mut fields {
                syn::Fields::Named(n) => n.named = kept.into_iter().map(strip_field_attrs).collect(),
                syn::Fields::Unnamed(u) => u.unnamed = kept.into_iter().map(strip_field_attrs).collect(),
                syn::Fields::Unit => {}
            }
            let shape = match &fields {
                syn::Fields::Named(_) => format!(" {}", text(&fields)),
                _ => text(&fields),
            };
            let item = ApiItem { parent: Some(path.clone()), ..plain(format!("{}{shape}", v.ident)) };
            self.add(Namespace::Variant, join(&path, &v.ident.to_string()), item);
        }
        self.derived_impls(&e.attrs, &name, &e.generics, module);
    }

    fn derived_impls(&mut self, attrs: &[syn::Attribute], name: &str, generics: &syn::Generics, module: &str) {
        let (_, args, _) = generics.split_for_impl();
        let self_text = format!("{name}{}", text(&args));
        for derive in self.derives(attrs) {
            self.impls.push(PendingImpl {
                module: module.to_owned(),
                trait_key: derive.clone(),
                trait_name: derive,
                self_text: self_text.clone(),
                self_name: name.to_owned(),
            });
        }
    }

    fn trait_def(&mut self, t: &syn::ItemTrait, module: &str) {
        let name = t.ident.to_string();
        let path = join(module, &name);
        let supertraits = if t.supertraits.is_empty() { String::new() } else { format!(": {}", text(&t.supertraits)) };
        self.add(Namespace::Type, path.clone(), plain(format!("trait {name}{}{supertraits}", text(&t.generics))));
        for item in &t.items {
            match item {
                syn::TraitItem::Fn(f) if self.on(&f.attrs) && !hidden(&f.attrs) => {
                    let item = ApiItem {
                        provided: Some(f.default.is_some()),
                        parent: Some(path.clone()),
                        ..plain(self.signature(&f.sig))
                    };
                    self.add(Namespace::TraitMethod, join(&path, &f.sig.ident.to_string()), item);
                }
                syn::TraitItem::Const(c) if self.on(&c.attrs) && !hidden(&c.attrs) => {
                    let item = ApiItem {
                        provided: Some(c.default.is_some()),
                        parent: Some(path.clone()),
                        ..plain(format!("const {}: {}", c.ident, text(&c.ty)))
                    };
                    self.add(Namespace::TraitMethod, join(&path, &c.ident.to_string()), item);
                }
                syn::TraitItem::Type(ty) if self.on(&ty.attrs) && !hidden(&ty.attrs) => {
                    let item = ApiItem {
                        provided: Some(ty.default.is_some()),
                        parent: Some(path.clone()),
                        ..plain(format!("type {}", ty.ident))
                    };
                    self.add(Namespace::TraitMethod, join(&path, &ty.ident.to_string()), item);
                }
                _ => {}
            }
        }
    }

    /// A function's signature without the parameters its `cfg`s leave out, nor attributes.
    fn signature(&self, sig: &syn::Signature) -> String {
        let mut sig = sig.clone();
        sig.inputs = sig
            .inputs
            .into_iter()
            .filter(|arg| match arg {
                syn::FnArg::Typed(t) => self.on(&t.attrs),
                syn::FnArg::Receiver(r) => self.on(&r.attrs),
            })
            .map(|arg| match arg {
                syn::FnArg::Typed(mut t) => {
                    t.attrs.clear();
                    syn::FnArg::Typed(t)
                }
                syn::FnArg::Receiver(mut r) => {
                    r.attrs.clear();
                    syn::FnArg::Receiver(r)
                }
            })
            .collect();
        text(&sig)
    }

    fn implementation(&mut self, i: &syn::ItemImpl, module: &str) {
        let self_name = type_name(&i.self_ty);
        let self_text = text(&i.self_ty);
        if let Some((_, trait_path, _)) = &i.trait_ {
            let trait_name = trait_path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
            self.impls.push(PendingImpl {
                module: module.to_owned(),
                trait_key: last_segment(trait_path),
                trait_name,
                self_text,
                self_name,
            });
            return;
        }
        let type_path = join(module, &self_name);
        for item in &i.items {
            match item {
                syn::ImplItem::Fn(f) if is_pub(&f.vis) && self.on(&f.attrs) && !hidden(&f.attrs) => {
                    let sig = self.signature(&f.sig);
                    self.add(Namespace::Function, join(&type_path, &f.sig.ident.to_string()), plain(sig));
                }
                syn::ImplItem::Const(c) if is_pub(&c.vis) && self.on(&c.attrs) && !hidden(&c.attrs) => {
                    let sig = format!("const {}: {}", c.ident, text(&c.ty));
                    self.add(Namespace::Const, join(&type_path, &c.ident.to_string()), plain(sig));
                }
                _ => {}
            }
        }
    }

    /// Macros called in item position: `macro_rules!` with `#[macro_export]` is API; the
    /// generator's `deserialize_struct!(Name { .. })` is the `Deserialize` impl of `Name`.
    fn item_macro(&mut self, m: &syn::ItemMacro, module: &str) {
        if m.mac.path.is_ident("macro_rules") {
            if let Some(name) = &m.ident
                && m.attrs.iter().any(|a| a.path().is_ident("macro_export"))
            {
                self.add(Namespace::Macro, format!("{name}!"), plain(format!("macro_rules! {name}")));
            }
            return;
        }
        let called = m.mac.path.segments.last().map(|s| s.ident.to_string());
        if called.as_deref() == Some("deserialize_struct")
            && let Some(proc_macro2::TokenTree::Ident(name)) = m.mac.tokens.clone().into_iter().next()
        {
            self.impls.push(PendingImpl {
                module: module.to_owned(),
                trait_key: "Deserialize".to_owned(),
                trait_name: "Deserialize".to_owned(),
                self_text: name.to_string(),
                self_name: name.to_string(),
            });
        }
    }

    fn reexports(&mut self, tree: &syn::UseTree, module: &str, prefix: &str) {
        match tree {
            syn::UseTree::Path(p) => self.reexports(&p.tree, module, &join(prefix, &p.ident.to_string())),
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                let sig = format!("use {}", join(prefix, &name));
                self.add(Namespace::ReExport, join(module, &name), plain(sig));
            }
            syn::UseTree::Rename(r) => {
                let sig = format!("use {} as {}", join(prefix, &r.ident.to_string()), r.rename);
                self.add(Namespace::ReExport, join(module, &r.rename.to_string()), plain(sig));
            }
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.reexports(t, module, prefix)),
            // A glob of a child module is walked under this module's path (see `items`).
            syn::UseTree::Glob(_) => {}
        }
    }

    /// Keeps the trait impls whose type or trait is public in the crate.
    fn resolve_impls(&mut self) {
        let public: BTreeSet<String> = self
            .out
            .keys()
            .filter(|(ns, _)| *ns == Namespace::Type)
            .map(|(_, path)| path.rsplit("::").next().unwrap_or(path).to_owned())
            .collect();
        for i in std::mem::take(&mut self.impls) {
            if !public.contains(&i.self_name) && !public.contains(&i.trait_name) {
                continue;
            }
            let place = if i.module.is_empty() { String::new() } else { format!(" (in {})", i.module) };
            let path = format!("impl {} for {}{place}", i.trait_key, i.self_text);
            // An impl belongs to its type when the type is the crate's, so that it comes and
            // goes with it in a report.
            let parent = public.contains(&i.self_name).then(|| join(&i.module, &i.self_name));
            let item = ApiItem { parent, ..plain(format!("impl {} for {}", i.trait_key, i.self_text)) };
            self.add(Namespace::Impl, path, item);
        }
    }
}

fn plain(signature: String) -> ApiItem {
    ApiItem { signature, exhaustive: None, provided: None, parent: None }
}

fn is_pub(vis: &syn::Visibility) -> bool {
    matches!(vis, syn::Visibility::Public(_))
}

fn hidden(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("doc") && a.parse_args::<syn::Path>().is_ok_and(|p| p.is_ident("hidden")))
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        _ => &[],
    }
}

/// `child` of `pub use child::*`.
fn glob_of(tree: &syn::UseTree) -> Option<String> {
    match tree {
        syn::UseTree::Path(p) if matches!(*p.tree, syn::UseTree::Glob(_)) => Some(p.ident.to_string()),
        _ => None,
    }
}

/// Evaluates a `cfg` predicate: `feature = ".."` against `features`; `test`, `docsrs`, `doc`
/// and anything else unknown are off (the API a dependent compiles against).
fn cfg_holds(meta: &syn::Meta, features: &BTreeSet<String>) -> bool {
    match meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("feature") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => features.contains(&s.value()),
            _ => false,
        },
        syn::Meta::List(list) => {
            let Ok(args) = list.parse_args_with(Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated) else {
                return false;
            };
            if list.path.is_ident("not") {
                args.len() == 1 && !cfg_holds(&args[0], features)
            } else if list.path.is_ident("any") {
                args.iter().any(|m| cfg_holds(m, features))
            } else if list.path.is_ident("all") {
                args.iter().all(|m| cfg_holds(m, features))
            } else {
                false
            }
        }
        _ => false,
    }
}

fn derive_paths(meta: &syn::Meta) -> Vec<syn::Path> {
    match meta {
        syn::Meta::List(list) => list
            .parse_args_with(Punctuated::<syn::Path, syn::Token![,]>::parse_terminated)
            .map(|paths| paths.into_iter().collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// A trait named by its last segment, with its type arguments but not its lifetimes:
/// `serde::Deserialize<'de>` → `Deserialize`, `From<&str>` → `From<&str>`.
fn last_segment(path: &syn::Path) -> String {
    let Some(last) = path.segments.last() else { return String::new() };
    let mut last = last.clone();
    if let syn::PathArguments::AngleBracketed(args) = &mut last.arguments {
        args.args = args.args.clone().into_iter().filter(|a| !matches!(a, syn::GenericArgument::Lifetime(_))).collect();
        if args.args.is_empty() {
            last.arguments = syn::PathArguments::None;
        }
    }
    text(&last)
}

/// The name of the type an impl is for: `Error`, `OrderedMap` of `OrderedMap<V>`, `Arc` of
/// `std::sync::Arc<T>`, `str` of `&str`.
fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default(),
        syn::Type::Reference(r) => type_name(&r.elem),
        other => text(other),
    }
}

fn strip_field_attrs(mut f: syn::Field) -> syn::Field {
    f.attrs.clear();
    f
}

fn unraw(name: &str) -> String {
    name.trim_start_matches("r#").to_owned()
}

/// Tokens as a Rust programmer writes them: `Option<Vec<ContentBlock>>`, not
/// `Option < Vec < ContentBlock > >`; `fn new(a: T) -> Self`. Only for comparing and showing
/// signatures, so one layout for each construct is enough.
pub fn text(tokens: &impl ToTokens) -> String {
    let mut out = String::new();
    write_tokens(tokens.to_token_stream(), &mut out);
    out.trim().to_owned()
}

fn write_tokens(tokens: proc_macro2::TokenStream, out: &mut String) {
    use proc_macro2::{Delimiter, Spacing, TokenTree};
    let word = |out: &mut String, w: &str| {
        if out.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '>' || c == ')' || c == ']') {
            out.push(' ');
        }
        out.push_str(w);
    };
    let mut op = String::new();
    for tt in tokens {
        match tt {
            TokenTree::Ident(i) => word(out, &i.to_string()),
            TokenTree::Literal(l) => word(out, &l.to_string()),
            TokenTree::Punct(p) => {
                op.push(p.as_char());
                if p.spacing() == Spacing::Joint && p.as_char() != '\'' {
                    continue;
                }
                // Spaces only ever end `out` after a separator (`, ` `: ` ` = ` ` -> `), which
                // a glued operator keeps: `a: &T`, `Vec<T>`, `&'a str`, `T: ?Sized`.
                match std::mem::take(&mut op).as_str() {
                    glued @ ("::" | "<" | ">" | ">>" | "&" | "'" | "?" | "!" | "*" | ".") => {
                        // A trailing comma before a closing `>` (prettyplease's, in a long list).
                        if glued.starts_with('>') && out.ends_with(", ") {
                            out.truncate(out.len() - 2);
                        }
                        out.push_str(glued);
                    }
                    sep @ ("," | ";" | ":") => {
                        out.truncate(out.trim_end().len());
                        out.push_str(sep);
                        out.push(' ');
                    }
                    other => {
                        out.truncate(out.trim_end().len());
                        out.push(' ');
                        out.push_str(other);
                        out.push(' ');
                    }
                }
            }
            TokenTree::Group(g) => {
                let (open, close) = match g.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::Brace => ("{ ", " }"),
                    Delimiter::None => ("", ""),
                };
                out.push_str(open);
                write_tokens(g.stream(), out);
                let trimmed = out.trim_end().trim_end_matches(',').trim_end().len();
                out.truncate(trimmed);
                out.push_str(close);
            }
        }
    }
}
