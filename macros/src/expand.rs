//! The expansion of `#[acp_agent]` / `#[acp_client]`: validate the impl block against the
//! generated handler table, then implement the generated trait by forwarding to it.
//!
//! What the block may hold:
//!
//! - handlers: a function named after a protocol method (`session_prompt`), or bound to an
//!   extension by `#[ext("_vendor/method")]` (requests) or `#[ext_notification("_vendor/name")]`
//!   (notifications);
//! - anything else that is not an `async fn`: plain helper functions, associated consts, which
//!   stay in the inherent impl untouched. An `async fn` with an unknown name is an error (a
//!   typo'd handler would otherwise be silently ignored).
//!
//! `#[cfg]` / `#[cfg_attr(.., cfg(..))]` on a handler carry over to everything generated for it
//! (the trait method, the match arm of an extension, the advertised capability), so a handler
//! that is configured out is neither handled nor advertised. A handler of an unstable method
//! is wrapped in the gate of its cargo feature that acp-types generates (`acp_types::feature_gates`).

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, ImplItem, ImplItemFn, ItemImpl, LitStr, Meta, ReceiverKind, ReturnType, Token, Type};

use crate::table::{self, Capability, Handler};

/// Which peer the block becomes: the role, and the protocol version (`#[acp_agent(v2)]`).
#[derive(Clone, Copy)]
pub struct Side {
    role: Role,
    v2: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Agent,
    Client,
}

impl Side {
    /// The side of `#[acp_agent]` (`Role::Agent`) or `#[acp_client]`, v1 until the attribute
    /// says `v2`.
    pub fn new(role: Role) -> Self {
        Side { role, v2: false }
    }

    fn is_agent(self) -> bool {
        self.role == Role::Agent
    }

    fn handlers(self) -> &'static [Handler] {
        match (self.role, self.v2) {
            (Role::Agent, false) => table::AGENT,
            (Role::Client, false) => table::CLIENT,
            (Role::Agent, true) => table::AGENT_V2,
            (Role::Client, true) => table::CLIENT_V2,
        }
    }

    fn capabilities(self) -> &'static [Capability] {
        match (self.role, self.v2) {
            (Role::Agent, false) => table::AGENT_CAPABILITIES,
            (Role::Client, false) => table::CLIENT_CAPABILITIES,
            (Role::Agent, true) => table::AGENT_V2_CAPABILITIES,
            (Role::Client, true) => table::CLIENT_V2_CAPABILITIES,
        }
    }

    /// Handlers that come all together or not at all (v2's session baseline, its auth pair).
    fn groups(self) -> &'static [table::Group] {
        match (self.role, self.v2) {
            (Role::Agent, true) => table::AGENT_V2_GROUPS,
            _ => &[],
        }
    }

    /// The same version's other role: where a handler of the other peer's methods belongs.
    fn other(self) -> Self {
        let role = match self.role {
            Role::Agent => Role::Client,
            Role::Client => Role::Agent,
        };
        Side { role, v2: self.v2 }
    }

    /// The attribute as the user wrote it, the trait and the context type.
    fn names(self) -> (&'static str, &'static str, &'static str) {
        match (self.role, self.v2) {
            (Role::Agent, false) => ("acp_agent", "Agent", "AgentContext"),
            (Role::Client, false) => ("acp_client", "Client", "ClientContext"),
            (Role::Agent, true) => ("acp_agent(v2)", "Agent", "AgentContext"),
            (Role::Client, true) => ("acp_client(v2)", "Client", "ClientContext"),
        }
    }

    /// Where the generated types, the context and the expansion helpers of this version are.
    fn paths(self, krate: &syn::Path) -> (TokenStream, TokenStream, TokenStream) {
        let (_, _, cx_name) = self.names();
        let cx = format_ident!("{cx_name}");
        if self.v2 {
            (quote!(#krate::acp_types::v2), quote!(#krate::v2::#cx), quote!(#krate::macro_support::v2))
        } else {
            (quote!(#krate::acp_types), quote!(#krate::#cx), quote!(#krate::macro_support))
        }
    }
}

/// Collects every error, so the user sees all of them at once.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, span: Span, message: impl std::fmt::Display) {
        self.add(syn::Error::new(span, message));
    }

    /// An error pointing at all of `tokens` (a type, say), not only at their first token.
    fn push_at(&mut self, tokens: &dyn ToTokens, message: impl std::fmt::Display) {
        self.add(syn::Error::new_spanned(tokens, message));
    }

    fn add(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
}

/// Which extension messages a function handles.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ExtKind {
    /// `#[ext("_name")]`: requests, answered with the function's result.
    Request,
    /// `#[ext_notification("_name")]`: notifications, never answered.
    Notification,
}

impl ExtKind {
    fn of(attr: &Attribute) -> Option<ExtKind> {
        if attr.path().is_ident("ext") {
            Some(ExtKind::Request)
        } else if attr.path().is_ident("ext_notification") {
            Some(ExtKind::Notification)
        } else {
            None
        }
    }

    fn attr(self) -> &'static str {
        match self {
            ExtKind::Request => "ext",
            ExtKind::Notification => "ext_notification",
        }
    }
}

/// An `#[ext(..)]` / `#[ext_notification(..)]` binding.
struct Ext {
    name: LitStr,
    kind: ExtKind,
    /// False when the name was rejected (already reported).
    valid: bool,
}

enum Binding {
    Protocol(&'static Handler),
    Ext(Ext),
}

/// One function of the block, bound to a method.
struct Bound<'a> {
    func: &'a ImplItemFn,
    /// Its position in the block's items.
    index: usize,
    binding: Binding,
    takes_cx: bool,
    /// The `cfg` predicate the function is compiled under, if any.
    cfg: Option<TokenStream>,
    /// Where type errors about the params, the context and the result point.
    params_span: Span,
    /// The user's params type, if the function has params.
    params_ty: Option<&'a Type>,
    cx_span: Span,
    output_span: Span,
    /// The first and last token of the user's error type (`E` in `Result<R, E>`), else of the
    /// return type.
    error_span: (Span, Span),
}

impl Bound<'_> {
    fn is_request(&self) -> bool {
        match &self.binding {
            Binding::Protocol(h) => h.response.is_some(),
            Binding::Ext(e) => e.kind == ExtKind::Request,
        }
    }

    fn cfg_attr(&self) -> TokenStream {
        match &self.cfg {
            Some(p) => quote!(#[cfg(#p)]),
            None => quote!(),
        }
    }
}

pub fn expand(side: Side, attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let (krate, side) = parse_attr(attr, side, &mut errors);
    let (macro_name, _, _) = side.names();
    let mut block: ItemImpl = match syn::parse2(item) {
        Ok(b) => b,
        Err(mut e) => {
            e.combine(syn::Error::new(Span::call_site(), format!("#[{macro_name}] goes on an inherent impl block")));
            return e.to_compile_error();
        }
    };
    if let Some((path, _)) = &block.trait_ {
        errors.push(
            path.span(),
            format!("#[{macro_name}] goes on an inherent impl block (`impl MyPeer {{ .. }}`), not a trait impl"),
        );
        // The error alone: the trait impl is not what the macro can use, and the compiler's own
        // complaints about it (missing trait items) would only hide the real one.
        return errors.0.map(|e| e.to_compile_error()).unwrap_or_default();
    }

    // Take the `#[ext(..)]` / `#[ext_notification(..)]` attributes off before the block is
    // emitted again.
    let exts: Vec<Option<Ext>> = block.items.iter_mut().map(|it| take_ext(it, &mut errors)).collect();

    let bound = bind(side, &block, exts, &mut errors);
    check_missing(side, &block, &bound, &mut errors);
    let overlaps = check_ext_overlaps(&bound, &mut errors);
    let inherent = inherent_block(&krate, &block, &bound);
    if let Some(e) = errors.0 {
        // Keep the block so the user's own code still type-checks and reports its errors, and
        // implement the trait anyway, so that the uses of the type where the trait is required
        // add no errors of their own.
        let e = e.to_compile_error();
        let stand_in = stand_in(side, &krate, &block);
        return quote!(#e #inherent #stand_in);
    }
    let imp = implement(side, &krate, &block, &bound);
    let imp = if side.v2 {
        // Without the runtime's v2 layer the expansion names nothing that exists: one error
        // that says so, instead of the compiler's about each missing item.
        let message = format!(
            "#[{macro_name}] needs protocol v2: enable the cargo feature `unstable_protocol_v2` \
             (`acp-rpc = {{ version = \"{version}\", features = [\"unstable_protocol_v2\"] }}`)",
            version = dependency_version()
        );
        gate(&krate, &["unstable_protocol_v2"], imp, quote!(::core::compile_error! { #message }))
    } else {
        imp
    };
    quote! {
        #inherent
        #imp
        #overlaps
    }
}

/// `#[acp_agent]`, `#[acp_agent(v2)]`, `#[acp_agent(crate = "path")]`, or both keys.
fn parse_attr(attr: TokenStream, side: Side, errors: &mut Errors) -> (syn::Path, Side) {
    let (macro_name, _, _) = side.names();
    let mut krate: syn::Path = syn::parse_quote!(::acp_rpc);
    let mut side = side;
    if attr.is_empty() {
        return (krate, side);
    }
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("crate") {
            krate = meta.value()?.parse::<LitStr>()?.parse()?;
            Ok(())
        } else if meta.path.is_ident("v2") {
            side.v2 = true;
            Ok(())
        } else {
            let key = meta.path.get_ident().map(|i| i.to_string()).unwrap_or_else(|| "?".into());
            Err(meta.error(format!(
                "unknown #[{macro_name}] key `{key}`; the keys are `v2` (protocol v2) and \
                 `crate = \"path::to::acp_rpc\"`"
            )))
        }
    });
    if let Err(e) = syn::parse::Parser::parse2(parser, attr) {
        errors.push(e.span(), e);
    }
    (krate, side)
}

/// Removes `#[ext(..)]` / `#[ext_notification(..)]` from an item; returns the binding of a
/// function.
fn take_ext(item: &mut ImplItem, errors: &mut Errors) -> Option<Ext> {
    let (attrs, func) = match item {
        ImplItem::Fn(f) => (&mut f.attrs, Some(f.sig.ident.to_string())),
        ImplItem::Const(c) => (&mut c.attrs, None),
        ImplItem::Type(t) => (&mut t.attrs, None),
        ImplItem::Macro(m) => (&mut m.attrs, None),
        _ => return None,
    };
    let mut found: Option<Ext> = None;
    let mut kept = Vec::with_capacity(attrs.len());
    for attr in std::mem::take(attrs) {
        let Some(kind) = ExtKind::of(&attr) else {
            kept.push(attr);
            continue;
        };
        let at = attr.path().span();
        let Some(func) = &func else {
            errors.push(at, format!("#[{}(..)] goes on the `async fn` that handles the extension", kind.attr()));
            continue;
        };
        if let Some(prev) = &found {
            errors.push(
                at,
                format!(
                    "one #[ext] or #[ext_notification] per function: `{func}` already handles `{}`; \
                     write one function per extension method",
                    prev.name.value()
                ),
            );
            continue;
        }
        found = Some(match attr.parse_args::<LitStr>() {
            Ok(name) => {
                let valid = name.value().starts_with('_');
                if !valid {
                    errors.push(
                        name.span(),
                        format!(
                            "extension method names start with `_` (e.g. \"_{}\"), so they cannot clash with the protocol's",
                            name.value()
                        ),
                    );
                }
                Ext { name, kind, valid }
            }
            Err(e) => {
                errors.push(at, format!("expected #[{}(\"_vendor/method\")]: {e}", kind.attr()));
                Ext { name: LitStr::new("", at), kind, valid: false }
            }
        });
    }
    *attrs = kept;
    found
}

fn bind<'a>(side: Side, block: &'a ItemImpl, exts: Vec<Option<Ext>>, errors: &mut Errors) -> Vec<Bound<'a>> {
    let (_, _, cx_name) = side.names();
    let mut bound: Vec<Bound> = Vec::new();
    for ((index, item), ext) in block.items.iter().enumerate().zip(exts) {
        let ImplItem::Fn(f) = item else { continue };
        let name = f.sig.ident.to_string();
        let binding = match ext {
            Some(ext) => Binding::Ext(ext),
            None => match side.handlers().iter().find(|h| h.name == name) {
                Some(h) => Binding::Protocol(h),
                // An `async fn` is meant as a handler: a typo must not go unnoticed.
                None if f.sig.asyncness.is_some() => {
                    errors.push(f.sig.ident.span(), unknown_name(side, &name));
                    continue;
                }
                // A helper: stays in the inherent impl.
                None => continue,
            },
        };
        // The signature: `async fn name(&self, params: P[, cx: Context]) -> Result<R, E>`.
        if f.sig.asyncness.is_none() {
            errors.push(f.sig.fn_token.span(), format!("handler `{name}` must be an `async fn`"));
        }
        if !f.sig.generics.params.is_empty() {
            errors.push(f.sig.generics.span(), format!("handler `{name}` cannot be generic"));
        }
        let mut inputs = f.sig.inputs.iter();
        match inputs.next() {
            Some(FnArg::Receiver(r)) => check_receiver(&name, r, errors),
            _ => errors.push(f.sig.ident.span(), format!("handler `{name}` takes `&self` first")),
        }
        let rest: Vec<&FnArg> = inputs.collect();
        if rest.is_empty() || rest.len() > 2 {
            errors.push(
                f.sig.inputs.span(),
                format!("handler `{name}` takes `&self`, its params, and optionally `cx: {cx_name}`"),
            );
        }
        let arg_type = |arg: Option<&&'a FnArg>| match arg {
            Some(FnArg::Typed(t)) => Some(&*t.ty),
            _ => None,
        };
        let arg_type_span = |arg: Option<&&FnArg>| match arg {
            Some(FnArg::Typed(t)) => t.ty.span(),
            Some(other) => other.span(),
            None => f.sig.ident.span(),
        };
        let output_span = match &f.sig.output {
            ReturnType::Type(_, ty) => ty.span(),
            ReturnType::Default => f.sig.ident.span(),
        };
        let params_ty = arg_type(rest.first());
        // With more arguments than two, the count is the error.
        let cx_ty = if rest.len() == 2 { arg_type(rest.get(1)) } else { None };
        check_arguments(side, &name, &binding, params_ty, cx_ty, errors);
        let error_span = match &f.sig.output {
            ReturnType::Type(_, ty) => match result_types(ty) {
                Some((_, Some(e))) => first_and_last(e),
                _ => first_and_last(ty),
            },
            ReturnType::Default => (f.sig.ident.span(), f.sig.ident.span()),
        };
        let b = Bound {
            func: f,
            index,
            binding,
            takes_cx: rest.len() == 2,
            cfg: cfg_predicate(&f.attrs),
            params_span: arg_type_span(rest.first()),
            params_ty,
            cx_span: arg_type_span(rest.get(1)),
            output_span,
            error_span,
        };
        // A request is answered with the result; a notification handler may return nothing.
        if b.is_request() {
            check_result(&b, &name, errors);
        }
        bound.push(b);
    }
    bound
}

/// The params and context types, checked by name against the table: the compiler's own
/// message for a mismatch would come from the generated call, with "expected" and "found"
/// swapped (and suggestions that do not apply).
fn check_arguments(
    side: Side,
    name: &str,
    binding: &Binding,
    params: Option<&Type>,
    cx: Option<&Type>,
    errors: &mut Errors,
) {
    let (_, _, cx_name) = side.names();
    if let Binding::Protocol(h) = binding {
        // `(&self, cx: AgentContext, params: PromptRequest)`: one error, saying which goes first.
        if let (Some(p), Some(c)) = (params, cx) {
            if fit(p, cx_name) == Fit::Yes && fit(c, h.params) == Fit::Yes {
                errors.push_at(
                    p,
                    format!(
                        "handler `{name}` takes its params first, then the context: \
                         `(&self, params: {}, cx: {cx_name})`",
                        h.params
                    ),
                );
                return;
            }
        }
        if let Some(p) = params {
            if fit(p, h.params) == Fit::No {
                errors.push_at(p, format!("handler `{name}` takes `{}` (by value), found `{}`", h.params, shown(p)));
            }
        }
    } else if let Some(p @ Type::Reference(_)) = params.map(peel) {
        errors.push_at(
            p,
            format!(
                "extension handler `{name}` takes its params by value (any `Deserialize` type, e.g. \
                 `serde_json::Value`), found `{}`",
                shown(p)
            ),
        );
    }
    if let Some(c) = cx {
        if fit(c, cx_name) == Fit::No {
            errors.push_at(
                c,
                format!("handler `{name}` takes its context as `cx: {cx_name}` (by value), found `{}`", shown(c)),
            );
        }
    }
}

/// A request handler returns `Result<R, E>`: anything else is an error at the return type,
/// and so is, for a protocol method, an `R` that names another type than the method's result.
fn check_result(b: &Bound, name: &str, errors: &mut Errors) {
    let expected = match &b.binding {
        Binding::Protocol(h) => format!("`Result<{}, Error>`", h.response.unwrap_or("_")),
        Binding::Ext(_) => "`Result<T, Error>` (`T: Serialize`)".into(),
    };
    let ty = match &b.func.sig.output {
        ReturnType::Type(_, ty) => ty,
        ReturnType::Default => {
            errors.push(b.func.sig.ident.span(), format!("handler `{name}` answers a request: it returns {expected}"));
            return;
        }
    };
    match result_types(ty) {
        // A type macro may well expand to a `Result`: the compiler checks it.
        None if matches!(peel(ty), Type::Macro(_) | Type::Verbatim(_)) => {}
        None => errors
            .push_at(ty, format!("handler `{name}` answers a request: it returns {expected}, found `{}`", shown(ty))),
        Some((Some(ok), _)) => {
            let Binding::Protocol(Handler { response: Some(r), .. }) = b.binding else { return };
            if fit(ok, r) == Fit::No {
                errors.push_at(
                    ok,
                    format!(
                        "handler `{name}` answers with `{r}`: it returns {expected}, found `{}` in the `Ok`",
                        shown(ok)
                    ),
                );
            }
        }
        Some((None, _)) => {}
    }
}

/// `ty` without the parentheses and invisible groups around it.
fn peel(ty: &Type) -> &Type {
    match ty {
        Type::Paren(p) => peel(&p.elem),
        Type::Group(g) => peel(&g.elem),
        _ => ty,
    }
}

/// The type arguments of a return type that is a path ending in `Result` (`Result<R, E>`,
/// `io::Result<R>`, `anyhow::Result<R>`): `None` for any other type.
fn result_types(ty: &Type) -> Option<(Option<&Type>, Option<&Type>)> {
    let Type::Path(p) = peel(ty) else { return None };
    let last = p.path.segments.last().filter(|s| p.qself.is_none() && s.ident == "Result")?;
    let mut args = match &last.arguments {
        syn::PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|a| match a {
                syn::GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect::<Vec<_>>()
            .into_iter(),
        _ => Vec::new().into_iter(),
    };
    Some((args.next(), args.next()))
}

#[derive(PartialEq, Eq)]
enum Fit {
    Yes,
    No,
    /// A type the macro cannot see through (`<T as Tr>::X`, a type macro): the compiler checks it.
    Unknown,
}

/// Whether `ty` names the type `expected` (by its last path segment, so `acp_types::PromptRequest`
/// fits `PromptRequest`). A reference, a tuple and the like never do.
fn fit(ty: &Type, expected: &str) -> Fit {
    match peel(ty) {
        Type::Path(p) if p.qself.is_some() => Fit::Unknown,
        Type::Path(p) => match p.path.segments.last() {
            Some(last) if last.ident == expected => Fit::Yes,
            _ => Fit::No,
        },
        Type::Macro(_) | Type::Verbatim(_) => Fit::Unknown,
        _ => Fit::No,
    }
}

/// A type as the user wrote it, for messages (`&acp_types::PromptRequest`, not
/// `& acp_types :: PromptRequest`).
fn shown(ty: &Type) -> String {
    let mut s = quote!(#ty).to_string();
    for (from, to) in
        [(" :: ", "::"), (":: ", "::"), ("& ", "&"), (" <", "<"), ("< ", "<"), (" >", ">"), (" ,", ","), ("* ", "*")]
    {
        s = s.replace(from, to);
    }
    s
}

/// Handlers take `&self` (or `self: &Self`): the runtime holds the peer and lends it to each
/// call, and calls run concurrently.
fn check_receiver(name: &str, r: &syn::Receiver, errors: &mut Errors) {
    let mutable = || {
        format!(
            "handler `{name}` takes `&self`: requests run concurrently, so use interior mutability (a Mutex, atomics) for state"
        )
    };
    match &r.kind {
        ReceiverKind::Reference(_, _, None) => {}
        ReceiverKind::Reference(_, _, Some(_)) => errors.push(r.span(), mutable()),
        ReceiverKind::Typed(_, ty) => match &**ty {
            Type::Reference(re) if is_self(&re.elem) && re.mutability.is_none() => {}
            Type::Reference(re) if is_self(&re.elem) => errors.push(ty.span(), mutable()),
            _ => errors.push(
                ty.span(),
                format!(
                    "handler `{name}` takes `&self` (or `self: &Self`): the runtime owns the peer and lends it to each call; \
                     to share state with spawned tasks, keep it in an `Arc` field"
                ),
            ),
        },
        _ => errors.push(
            r.self_token.span(),
            format!("handler `{name}` takes `&self`, not `self`: the runtime owns the peer and lends it to each call"),
        ),
    }
}

fn is_self(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident("Self"))
}

/// The predicate a function is compiled under: its `#[cfg(p)]`s, and the `cfg`s its
/// `#[cfg_attr(q, ..)]`s add (`any(not(q), ..)`); `None` when there are none.
fn cfg_predicate(attrs: &[Attribute]) -> Option<TokenStream> {
    let preds: Vec<TokenStream> = attrs.iter().filter_map(|a| meta_predicate(&a.meta)).collect();
    match preds.len() {
        0 => None,
        1 => preds.into_iter().next(),
        _ => Some(quote!(all(#(#preds),*))),
    }
}

fn meta_predicate(meta: &Meta) -> Option<TokenStream> {
    let Meta::List(list) = meta else { return None };
    if list.path.is_ident("cfg") {
        return Some(list.tokens.clone());
    }
    if !list.path.is_ident("cfg_attr") {
        return None;
    }
    // `cfg_attr(q, attr, ..)`; a malformed one is the compiler's to report.
    let metas = list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated).ok()?;
    let mut metas = metas.into_iter();
    let q = metas.next()?;
    let inner: Vec<TokenStream> = metas.filter_map(|m| meta_predicate(&m)).collect();
    (!inner.is_empty()).then(|| quote!(any(not(#q), all(#(#inner),*))))
}

fn unknown_name(side: Side, name: &str) -> String {
    let (macro_name, _, _) = side.names();
    // A handler of the other peer's method: "did you mean" would suggest an unrelated name
    // (`session_update` -> `session_delete`), when the function is in the wrong block.
    if let Some(h) = side.other().handlers().iter().find(|h| h.name == name) {
        let (other_macro, _, _) = side.other().names();
        let (sender, handler) = if side.is_agent() { ("agent", "client") } else { ("client", "agent") };
        return format!(
            "`{name}` is {article} {handler} method (`{method}`: the {sender} sends it, the {handler} handles it); \
             its handler goes in an #[{other_macro}] impl block, not #[{macro_name}]",
            article = if handler == "agent" { "an" } else { "a" },
            method = h.method,
        );
    }
    let valid: Vec<&str> = side.handlers().iter().map(|h| h.name).collect();
    let stable: Vec<&str> = side.handlers().iter().filter(|h| h.features.is_empty()).map(|h| h.name).collect();
    let gated: Vec<String> = side
        .handlers()
        .iter()
        .filter(|h| !h.features.is_empty())
        .map(|h| format!("{} ({})", h.name, h.features.join(" or ")))
        .collect();
    let mut listed = stable.join(", ");
    if !gated.is_empty() {
        listed.push_str(";\n       with cargo features: ");
        listed.push_str(&gated.join(", "));
    }
    let best =
        valid.iter().map(|v| (distance(name, v), *v)).min().filter(|(d, v)| *d <= v.len().max(name.len()) / 3 + 1);
    let hint = match best {
        Some((_, v)) => format!("did you mean `{v}`? "),
        None => String::new(),
    };
    format!(
        "`{name}` is not a method #[{macro_name}] handles; {hint}the handlers are: {}.\n\
         An async helper goes in a separate impl block (plain `fn` helpers may stay); bind extensions with \
         #[ext(\"_vendor/method\")] or #[ext_notification(\"_vendor/method\")]",
        listed
    )
}

/// Edit distance, for "did you mean".
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push((prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

fn check_missing(side: Side, block: &ItemImpl, bound: &[Bound], errors: &mut Errors) {
    let (macro_name, _, _) = side.names();
    let handles = |h: &Handler| bound.iter().any(|b| matches!(b.binding, Binding::Protocol(bh) if bh.name == h.name));
    let missing: Vec<String> = side
        .handlers()
        .iter()
        .filter(|h| h.baseline && !handles(h))
        .map(|h| {
            let ret = h.response.map(|r| format!("Result<{r}, Error>")).unwrap_or_else(|| "Result<(), Error>".into());
            format!("    async fn {}(&self, params: {}) -> {ret}", h.name, h.params)
        })
        .collect();
    if !missing.is_empty() {
        errors.push(
            block.self_ty.span(),
            format!("#[{macro_name}] is missing the spec's baseline handlers:\n{}", missing.join("\n")),
        );
    }
    // A group is all or nothing: some of its handlers without the others is an error.
    let by_method = |method: &str| side.handlers().iter().find(|h| h.method == method);
    for group in side.groups() {
        let (present, absent): (Vec<&str>, Vec<&str>) =
            group.methods.iter().partition(|m| by_method(m).is_some_and(&handles));
        // Missing baseline handlers are reported above already; say each thing once.
        let absent: Vec<String> = absent
            .iter()
            .filter_map(|m| by_method(m))
            .filter(|h| !h.baseline)
            .map(|h| format!("    async fn {}(&self, params: {}) -> ...", h.name, h.params))
            .collect();
        if present.is_empty() || absent.is_empty() {
            continue;
        }
        let field = group.path.join(".");
        errors.push(
            block.self_ty.span(),
            format!(
                "#[{macro_name}]: the methods behind `{field}` come together ({}), and this block handles \
                 only some of them; add:\n{}",
                group.methods.join(", "),
                absent.join("\n")
            ),
        );
    }
}

/// Two functions for one extension message: an error, or, when either is under `cfg`, an error
/// under the conjunction of their `cfg`s (when both are compiled in).
fn check_ext_overlaps(bound: &[Bound], errors: &mut Errors) -> TokenStream {
    let mut conditional = TokenStream::new();
    for (i, b) in bound.iter().enumerate() {
        let Binding::Ext(e) = &b.binding else { continue };
        if !e.valid {
            continue;
        }
        let prev = bound[..i].iter().find(|p| {
            matches!(&p.binding, Binding::Ext(pe) if pe.valid && pe.kind == e.kind && pe.name.value() == e.name.value())
        });
        let Some(prev) = prev else { continue };
        let what = match e.kind {
            ExtKind::Request => "method",
            ExtKind::Notification => "notification",
        };
        let message = format!(
            "`{}` is already handled by `{}`; two functions cannot handle one {what}",
            e.name.value(),
            prev.func.sig.ident
        );
        match (&prev.cfg, &b.cfg) {
            (None, None) => errors.push(e.name.span(), message),
            (p, q) => {
                let all = quote!(all());
                let (p, q) = (p.as_ref().unwrap_or(&all), q.as_ref().unwrap_or(&all));
                conditional
                    .extend(quote_spanned!(e.name.span()=> #[cfg(all(#p, #q))] ::core::compile_error! { #message }));
            }
        }
    }
    conditional
}

/// `items` when acp-types is built with one of `features`, else `otherwise`.
fn gate(krate: &syn::Path, features: &[&str], items: TokenStream, otherwise: TokenStream) -> TokenStream {
    features.iter().rev().fold(otherwise, |otherwise, feature| {
        let gate = format_ident!("{feature}");
        quote!(#krate::acp_types::feature_gates::#gate! { { #items } { #otherwise } })
    })
}

/// The user's block again, with each handler of an unstable method inside its feature's gate:
/// when the feature is off, the handler is replaced by one error naming the feature (instead
/// of the compiler's errors about the types and trait methods that do not exist).
fn inherent_block(krate: &syn::Path, block: &ItemImpl, bound: &[Bound]) -> TokenStream {
    let mut block = block.clone();
    for b in bound {
        let Binding::Protocol(h) = b.binding else { continue };
        if h.features.is_empty() {
            continue;
        }
        let features = h.features.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(" or ");
        let message = format!(
            "`{}` handles `{}`, an unstable method: enable the cargo feature {features} \
             (e.g. `acp-rpc = {{ version = \"{}\", features = [\"{}\"] }}`)",
            h.name,
            h.method,
            dependency_version(),
            h.features[0]
        );
        let error = quote_spanned!(b.func.sig.ident.span()=> ::core::compile_error! { #message });
        let func = b.func;
        let cfg = b.cfg_attr();
        let gated = gate(krate, h.features, quote!(#func), error);
        block.items[b.index] = ImplItem::Verbatim(quote!(#cfg #gated));
    }
    quote!(#block)
}

/// The spans of the first and the last token of `tokens`.
fn first_and_last(tokens: &dyn ToTokens) -> (Span, Span) {
    let mut tokens = tokens.to_token_stream().into_iter();
    let first = tokens.next().map_or_else(Span::call_site, |t| t.span());
    (first, tokens.last().map_or(first, |t| t.span()))
}

/// The expression `value` written `(value,).0`, which has a first and a last token, at `first`
/// and `last`: the compiler reports a trait bound an argument does not meet at the argument, and
/// so at all of the user's type.
fn spanning(value: TokenStream, (first, last): (Span, Span)) -> TokenStream {
    let mut tuple = Group::new(Delimiter::Parenthesis, quote!(#value,));
    tuple.set_span(Span::call_site().located_at(first));
    let field = respan(quote!(.0), Span::call_site().located_at(last));
    quote!(#tuple #field)
}

/// `tokens`, all of them at `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let TokenTree::Group(g) = &tt {
                let mut group = Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                tt = group.into();
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}

/// The capabilities the handlers present earn; a capability of handlers under `cfg` is
/// advertised under the same `cfg`.
fn capabilities(side: Side, bound: &[Bound]) -> TokenStream {
    let rows = side.capabilities().iter().filter_map(|c| {
        let mut preds = Vec::new();
        for method in c.methods {
            let handlers: Vec<&Bound> =
                bound.iter().filter(|b| matches!(b.binding, Binding::Protocol(h) if h.method == *method)).collect();
            if handlers.is_empty() {
                return None;
            }
            if handlers.iter().any(|b| b.cfg.is_none()) {
                continue;
            }
            let any = handlers.iter().filter_map(|b| b.cfg.as_ref());
            preds.push(quote!(any(#(#any),*)));
        }
        let path = c.path;
        let object = c.object;
        let cfg = if preds.is_empty() { quote!() } else { quote!(#[cfg(all(#(#preds),*))]) };
        Some(quote!(#cfg (&[#(#path),*], #object)))
    });
    // A group's field (`capabilities.session`) is advertised when all its handlers are there.
    let handled = |method: &str| bound.iter().any(|b| matches!(b.binding, Binding::Protocol(h) if h.method == method));
    let groups = side.groups().iter().filter(|g| g.advertised && g.methods.iter().all(|m| handled(m))).map(|g| {
        let path = g.path;
        quote!((&[#(#path),*], true))
    });
    let rows: Vec<TokenStream> = rows.chain(groups).collect();
    quote!(&[#(#rows),*])
}

/// The trait implemented without the user's functions, for when the block has errors: the
/// required methods never complete (nothing runs: the program does not compile), and no
/// capability is advertised.
fn stand_in(side: Side, krate: &syn::Path, block: &ItemImpl) -> TokenStream {
    let (_, trait_name, _) = side.names();
    let (impl_generics, _, where_clause) = block.generics.split_for_impl();
    let self_ty = &block.self_ty;
    let trait_ident = format_ident!("{trait_name}");
    let (types, cx_ty, support) = side.paths(krate);
    // The trait's methods without a default are among the baseline handlers.
    let methods = side.handlers().iter().filter(|h| h.baseline).map(|h| {
        let f = format_ident!("{}", h.name);
        let params = format_ident!("{}", h.params);
        let output = match h.response {
            Some(r) => {
                let r = format_ident!("{r}");
                quote!(::core::result::Result<#types::#r, #types::Error>)
            }
            None => quote!(::core::result::Result<(), #types::Error>),
        };
        let method = quote! {
            #[allow(clippy::manual_async_fn)]
            fn #f(&self, params: #types::#params, cx: #cx_ty)
                -> impl ::core::future::Future<Output = #output> + ::core::marker::Send {
                let _ = (params, cx);
                ::core::future::pending()
            }
        };
        if h.features.is_empty() { method } else { gate(krate, h.features, method, quote!()) }
    });
    quote! {
        impl #impl_generics #types::#trait_ident<#cx_ty> for #self_ty #where_clause {
            #(#methods)*
        }

        impl #impl_generics #support::Advertise for #self_ty #where_clause {
            const CAPABILITIES: &'static [(&'static [&'static str], bool)] = &[];
        }
    }
}

fn implement(side: Side, krate: &syn::Path, block: &ItemImpl, bound: &[Bound]) -> TokenStream {
    let (_, trait_name, _) = side.names();
    let (impl_generics, _, where_clause) = block.generics.split_for_impl();
    let self_ty = &block.self_ty;
    let trait_ident = format_ident!("{trait_name}");
    let (types, cx_ty, support) = side.paths(krate);
    // The conversion of the user's error, spanned at the user's error type so that an error
    // type without `Into<acp_types::Error>` is reported there, with `HandlerError`'s message.
    let into_error = |b: &Bound| {
        let (first, last) = b.error_span;
        let path = respan(quote!(#support::HandlerError::<_>::), Span::call_site().located_at(first));
        let from = Ident::new("from_handler", Span::call_site().located_at(last));
        let arg = spanning(quote!(__acp_error), b.error_span);
        quote!(|__acp_error| -> #types::Error { #path #from(#arg) })
    };

    // The call of the user's function, its arguments spanned at the user's parameter types so
    // that a type mismatch points there.
    let call = |b: &Bound| {
        let f = &b.func.sig.ident;
        let params = quote_spanned!(b.params_span=> params);
        let cx = quote_spanned!(b.cx_span=> cx);
        let args = if b.takes_cx { quote!(#params, #cx) } else { quote!(#params) };
        quote_spanned!(b.func.sig.span()=> <#self_ty>::#f(self, #args).await)
    };
    // A notification handler returns `()` or `Result<(), E>`; anything else is reported at
    // the user's return type, and an `E` without the conversion at the user's error type.
    let notified = |b: &Bound| {
        let call = call(b);
        let into_error = into_error(b);
        quote_spanned! {b.output_span=> {
            use #support::notified as __acp_notified;
            let __acp_result = #call;
            __acp_notified(__acp_result).map_err(#into_error)
        }}
    };

    // The decoding of an extension's params, spanned at the user's params type so that a type
    // that is not `Deserialize` is reported there.
    let ext_params = |b: &Bound| match b.params_ty {
        Some(ty) => quote!(#support::ext_params::<#ty>(params.0)?),
        None => quote!(#support::ext_params(params.0)?),
    };

    let mut methods = Vec::new();
    for (i, b) in bound.iter().enumerate() {
        let Binding::Protocol(h) = b.binding else { continue };
        // Two functions of one name that may both be compiled in: the compiler reports the
        // duplicate in the user's block; a duplicate trait method would only repeat it.
        let same = |p: &Bound| matches!(p.binding, Binding::Protocol(ph) if ph.name == h.name);
        if bound[..i].iter().any(|p| same(p) && (p.cfg.is_none() || b.cfg.is_none())) {
            continue;
        }
        let f = &b.func.sig.ident;
        let params = format_ident!("{}", h.params);
        let span = b.func.sig.span();
        let unused_cx = if b.takes_cx { quote!() } else { quote!(let _ = cx;) };
        let (output, body) = match h.response {
            Some(r) => {
                let r = format_ident!("{r}");
                let call = call(b);
                let earn = if h.method == "initialize" && side.is_agent() {
                    quote!(#support::earn(&cx, <Self as #support::Advertise>::CAPABILITIES);)
                } else {
                    quote!()
                };
                let into_error = into_error(b);
                (quote!(::core::result::Result<#types::#r, #types::Error>), quote!(#earn #call.map_err(#into_error)))
            }
            None => (quote!(::core::result::Result<(), #types::Error>), notified(b)),
        };
        let method = quote_spanned! {span=>
            #[allow(clippy::manual_async_fn)]
            fn #f(&self, params: #types::#params, cx: #cx_ty)
                -> impl ::core::future::Future<Output = #output> + ::core::marker::Send {
                async move {
                    #unused_cx
                    #body
                }
            }
        };
        let cfg = b.cfg_attr();
        let method = if h.features.is_empty() { method } else { gate(krate, h.features, method, quote!()) };
        methods.push(quote!(#cfg #method));
    }

    let ext = |kind: ExtKind| {
        bound.iter().filter_map(move |b| match &b.binding {
            Binding::Ext(e) if e.kind == kind => Some((b, &e.name)),
            _ => None,
        })
    };

    let request_arms: Vec<TokenStream> = ext(ExtKind::Request)
        .map(|(b, lit)| {
            let cfg = b.cfg_attr();
            let call = call(b);
            let into_error = into_error(b);
            let ext_params = ext_params(b);
            quote_spanned! {b.func.sig.span()=>
                #cfg
                #lit => {
                    // Spanned at the user's code: a handler taking `()` must not trip this lint.
                    #[allow(clippy::let_unit_value)]
                    let params = #ext_params;
                    let result = #call.map_err(#into_error)?;
                    #support::ext_result(result)
                }
            }
        })
        .collect();
    let ext_method = if request_arms.is_empty() {
        quote!()
    } else {
        // `unreachable_patterns`: two functions for one name under `cfg`s that both hold are
        // already an error (see `check_ext_overlaps`).
        quote! {
            #[allow(clippy::manual_async_fn, clippy::useless_conversion, unreachable_patterns)]
            fn ext_method(&self, method: &str, params: #types::ExtRequest, cx: #cx_ty)
                -> impl ::core::future::Future<Output = ::core::result::Result<#types::ExtResponse, #types::Error>> + ::core::marker::Send {
                let method = method.to_owned();
                async move {
                    let _ = (&params, &cx);
                    match method.as_str() {
                        #(#request_arms)*
                        other => ::core::result::Result::Err(#types::Error::method_not_found().data(#support::error_data(other))),
                    }
                }
            }
        }
    };

    let notification_arms: Vec<TokenStream> = ext(ExtKind::Notification)
        .map(|(b, lit)| {
            let cfg = b.cfg_attr();
            let notified = notified(b);
            let ext_params = ext_params(b);
            quote_spanned! {b.func.sig.span()=>
                #cfg
                #lit => {
                    #[allow(clippy::let_unit_value)]
                    let params = #ext_params;
                    #notified
                }
            }
        })
        .collect();
    let ext_notification = if notification_arms.is_empty() {
        quote!()
    } else {
        quote! {
            #[allow(clippy::manual_async_fn, clippy::useless_conversion, unreachable_patterns)]
            fn ext_notification(&self, method: &str, params: #types::ExtNotification, cx: #cx_ty)
                -> impl ::core::future::Future<Output = ::core::result::Result<(), #types::Error>> + ::core::marker::Send {
                let method = method.to_owned();
                async move {
                    let _ = (&params, &cx);
                    match method.as_str() {
                        #(#notification_arms)*
                        // An unknown extension notification is ignored.
                        _ => ::core::result::Result::Ok(()),
                    }
                }
            }
        }
    };

    let capabilities = capabilities(side, bound);
    quote! {
        impl #impl_generics #types::#trait_ident<#cx_ty> for #self_ty #where_clause {
            #(#methods)*
            #ext_method
            #ext_notification
        }

        impl #impl_generics #support::Advertise for #self_ty #where_clause {
            const CAPABILITIES: &'static [(&'static [&'static str], bool)] = #capabilities;
        }
    }
}

/// The version requirement a hint puts in a dependency line: this release's, as Cargo reads it
/// (`"0.1"` for 0.1.x, `"1"` for 1.x). The crates of the family are released together.
fn dependency_version() -> &'static str {
    let version = env!("CARGO_PKG_VERSION");
    let mut parts = version.split('.');
    match (parts.next(), parts.next()) {
        (Some("0"), Some(minor)) => &version[..2 + minor.len()],
        (Some(major), _) => &version[..major.len()],
        _ => version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn predicate(item: &str) -> Option<String> {
        let f: ImplItemFn = syn::parse_str(item).unwrap();
        cfg_predicate(&f.attrs).map(|p| p.to_string())
    }

    #[test]
    fn types_fit_by_their_last_segment() {
        let ty = |s: &str| syn::parse_str::<Type>(s).unwrap();
        for fits in
            ["PromptRequest", "acp_types::PromptRequest", "::acp_rpc::acp_types::PromptRequest", "(PromptRequest)"]
        {
            assert!(fit(&ty(fits), "PromptRequest") == Fit::Yes, "{fits}");
        }
        for wrong in
            ["NewSessionRequest", "&PromptRequest", "&mut PromptRequest", "(PromptRequest,)", "[PromptRequest; 1]"]
        {
            assert!(fit(&ty(wrong), "PromptRequest") == Fit::No, "{wrong}");
        }
        for unknown in ["<A as B>::PromptRequest", "ty!()"] {
            assert!(fit(&ty(unknown), "PromptRequest") == Fit::Unknown, "{unknown}");
        }
        assert_eq!(shown(&ty("& 'a acp_types :: X < u8 , Y >")), "&'a acp_types::X<u8, Y>");
    }

    #[test]
    fn result_types_of_paths_ending_in_result() {
        let types = |s: &str| {
            let ty = syn::parse_str::<Type>(s).unwrap();
            result_types(&ty).map(|(ok, e)| (ok.map(shown), e.map(shown)))
        };
        assert_eq!(types("Result<A, E>"), Some((Some("A".into()), Some("E".into()))));
        assert_eq!(types("std::io::Result<A>"), Some((Some("A".into()), None)));
        assert_eq!(types("Result"), Some((None, None)));
        assert_eq!(types("A"), None);
        assert_eq!(types("Option<Result<A, E>>"), None);
    }

    #[test]
    fn cfg_predicates_combine_cfg_and_cfg_attr() {
        assert_eq!(predicate("#[doc = \"x\"] async fn f(&self) {}"), None);
        assert_eq!(predicate("#[cfg(unix)] async fn f(&self) {}").as_deref(), Some("unix"));
        assert_eq!(
            predicate("#[cfg(unix)] #[cfg(feature = \"a\")] async fn f(&self) {}").as_deref(),
            Some("all (unix , feature = \"a\")")
        );
        // Only the `cfg`s a `cfg_attr` adds matter, nested ones included.
        assert_eq!(predicate("#[cfg_attr(test, allow(dead_code))] async fn f(&self) {}"), None);
        assert_eq!(
            predicate("#[cfg_attr(test, allow(dead_code), cfg(unix), cfg_attr(x, cfg(y)))] async fn f(&self) {}")
                .as_deref(),
            Some("any (not (test) , all (unix , any (not (x) , all (y))))")
        );
    }
}
