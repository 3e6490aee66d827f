//! `#[acp_proxy]`: an inherent impl block becomes an `acp_rpc::proxy::Proxy` that handles
//! the messages its functions are named after and forwards everything else untouched.
//!
//! A function's name is a protocol method's handler name, from the client's side (the methods
//! an agent handles: `session_prompt`, `session_cancel`, ...) or from the agent's side (the
//! methods a client handles: `session_update`, `session_request_permission`, ...). The few
//! names on both sides (`mcp_message`) take `#[from(client)]` or `#[from(agent)]`; extensions
//! take `#[ext("_vendor/method")]` or `#[ext_notification("_vendor/method")]` with a
//! `#[from(..)]`. The params type and the answer are the user's choice within the runtime's
//! `FromParams` / `IntoParams` / `IntoAnswer` traits; names are all the macro checks, so a
//! proxy needs no types of a method it only routes.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::spanned::Spanned;
use syn::{FnArg, ImplItem, ItemImpl, LitStr, ReturnType};

use crate::expand::distance;
use crate::table::{self, Handler};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum From {
    Client,
    Agent,
}

impl From {
    fn word(self) -> &'static str {
        match self {
            From::Client => "client",
            From::Agent => "agent",
        }
    }

    /// The methods arriving from this side: those the peer on the other side handles.
    fn handlers(self) -> &'static [Handler] {
        match self {
            From::Client => table::AGENT,
            From::Agent => table::CLIENT,
        }
    }
}

struct Bound {
    ident: syn::Ident,
    from: From,
    method: String,
    request: bool,
}

#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, span: Span, message: impl std::fmt::Display) {
        let e = syn::Error::new(span, message);
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
}

pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let mut krate: syn::Path = syn::parse_quote!(::acp_rpc);
    if !attr.is_empty() {
        let parser = syn::meta::parser(|meta| {
            if meta.path.is_ident("crate") {
                krate = meta.value()?.parse::<LitStr>()?.parse()?;
                Ok(())
            } else {
                Err(meta.error("unknown #[acp_proxy] key; the only key is `crate = \"path::to::acp_rpc\"`"))
            }
        });
        if let Err(e) = syn::parse::Parser::parse2(parser, attr) {
            errors.push(e.span(), e);
        }
    }
    let mut block: ItemImpl = match syn::parse2(item) {
        Ok(block) => block,
        Err(e) => return e.to_compile_error(),
    };
    if let Some((path, _)) = &block.trait_ {
        errors
            .push(path.span(), "#[acp_proxy] goes on an inherent impl block (`impl MyProxy { .. }`), not a trait impl");
    }
    let mut bound = Vec::new();
    for item in &mut block.items {
        if let ImplItem::Fn(func) = item {
            if let Some(b) = bind(func, &mut errors) {
                if let Some(prev) =
                    bound.iter().find(|p: &&Bound| (p.from, &p.method, p.request) == (b.from, &b.method, b.request))
                {
                    errors.push(
                        func.sig.ident.span(),
                        format!(
                            "`{}` from the {} side is already handled by `{}`",
                            b.method,
                            b.from.word(),
                            prev.ident
                        ),
                    );
                }
                bound.push(b);
            }
        }
    }
    if let Some(e) = errors.0 {
        let error = e.to_compile_error();
        return quote!(#block #error);
    }
    let proxy_impl = implement(&krate, &block, &bound);
    quote!(#block #proxy_impl)
}

/// Binds one function of the block (removing the macro's attributes from it); `None` for a
/// plain helper or after an error.
fn bind(func: &mut syn::ImplItemFn, errors: &mut Errors) -> Option<Bound> {
    let mut from = None;
    let mut ext: Option<(LitStr, bool)> = None;
    let mut kept = Vec::new();
    for attr in std::mem::take(&mut func.attrs) {
        if attr.path().is_ident("from") {
            match attr.parse_args::<syn::Ident>() {
                Ok(side) if side == "client" => from = Some(From::Client),
                Ok(side) if side == "agent" => from = Some(From::Agent),
                _ => errors.push(attr.span(), "expected #[from(client)] or #[from(agent)]"),
            }
        } else if attr.path().is_ident("ext") || attr.path().is_ident("ext_notification") {
            let request = attr.path().is_ident("ext");
            match attr.parse_args::<LitStr>() {
                Ok(name) if name.value().starts_with('_') => ext = Some((name, request)),
                Ok(name) => errors.push(name.span(), "extension method names start with `_`"),
                Err(e) => errors.push(attr.span(), format!("expected #[ext(\"_vendor/method\")]: {e}")),
            }
        } else {
            kept.push(attr);
        }
    }
    func.attrs = kept;
    let ident = func.sig.ident.clone();
    let name = ident.to_string();
    if func.sig.asyncness.is_none() {
        if from.is_some() || ext.is_some() {
            errors.push(ident.span(), format!("`{name}` handles a message, so it is an `async fn`"));
        }
        return None;
    }
    check_signature(func, errors);
    let (method, request, from) = match ext {
        Some((lit, request)) => {
            let Some(from) = from else {
                errors.push(
                    lit.span(),
                    "an extension can arrive from either side: say which with #[from(client)] or #[from(agent)]",
                );
                return None;
            };
            (lit.value(), request, from)
        }
        None => {
            let sides: Vec<From> = from.map_or_else(|| vec![From::Client, From::Agent], |f| vec![f]);
            let found: Vec<(From, &Handler)> = sides
                .iter()
                .filter_map(|side| side.handlers().iter().find(|h| h.name == name).map(|h| (*side, h)))
                .collect();
            match found.as_slice() {
                [(side, handler)] => (handler.method.to_owned(), handler.response.is_some(), *side),
                [] => {
                    errors.push(ident.span(), unknown_name(&name, from));
                    return None;
                }
                _ => {
                    errors.push(
                        ident.span(),
                        format!("`{name}` arrives from both sides; say which with #[from(client)] or #[from(agent)]"),
                    );
                    return None;
                }
            }
        }
    };
    if !request {
        if let ReturnType::Type(_, ty) = &func.sig.output {
            let unit = matches!(&**ty, syn::Type::Tuple(t) if t.elems.is_empty());
            if !unit {
                errors.push(
                    ty.span(),
                    format!("`{name}` handles a notification, which is never answered: it returns nothing"),
                );
            }
        }
    } else if matches!(func.sig.output, ReturnType::Default) {
        errors.push(
            func.sig.span(),
            format!(
                "`{name}` handles a request: it returns its answer, `Result<A, E>` (e.g. what `forward()` returns)"
            ),
        );
    }
    Some(Bound { ident, from, method, request })
}

fn check_signature(func: &syn::ImplItemFn, errors: &mut Errors) {
    let name = &func.sig.ident;
    let mut inputs = func.sig.inputs.iter();
    match inputs.next() {
        Some(FnArg::Receiver(r)) if matches!(r.kind, syn::ReceiverKind::Reference(_, _, None)) => {}
        Some(other) => errors.push(other.span(), format!("`{name}` takes `&self` first (handlers run concurrently)")),
        None => errors.push(func.sig.span(), format!("`{name}` takes `&self` and the message")),
    }
    let rest: Vec<_> = inputs.collect();
    if rest.len() != 1 {
        errors.push(
            func.sig.inputs.span(),
            format!(
                "`{name}` takes the message as its one argument: `ProxiedRequest<P>` for a request, \
                 `ProxiedNotification<P>` for a notification"
            ),
        );
    }
}

fn unknown_name(name: &str, from: Option<From>) -> String {
    let sides: Vec<From> = from.map_or_else(|| vec![From::Client, From::Agent], |f| vec![f]);
    let names: Vec<&str> = sides.iter().flat_map(|s| s.handlers().iter().map(|h| h.name)).collect();
    let best =
        names.iter().map(|v| (distance(name, v), *v)).min().filter(|(d, v)| *d <= v.len().max(name.len()) / 3 + 1);
    let hint = best.map(|(_, v)| format!("did you mean `{v}`? ")).unwrap_or_default();
    let list = |side: From| side.handlers().iter().map(|h| h.name).collect::<Vec<_>>().join(", ");
    format!(
        "`{name}` is not a message a proxy can intercept; {hint}from the client: {}; from the agent: {}.\n\
         An async helper goes in a separate impl block; bind extensions with #[ext(\"_vendor/method\")] and #[from(..)]",
        list(From::Client),
        list(From::Agent)
    )
}

fn implement(krate: &syn::Path, block: &ItemImpl, bound: &[Bound]) -> TokenStream {
    let self_ty = &block.self_ty;
    let (impl_generics, _, where_clause) = block.generics.split_for_impl();
    let intercepted = |side: From| {
        let methods: Vec<&str> = bound.iter().filter(|b| b.from == side).map(|b| b.method.as_str()).collect();
        if methods.is_empty() { quote!(false) } else { quote!(matches!(method, #(#methods)|*)) }
    };
    let (client, agent) = (intercepted(From::Client), intercepted(From::Agent));
    let side = |from: From| match from {
        From::Client => quote!(#krate::proxy::Side::Client),
        From::Agent => quote!(#krate::proxy::Side::Agent),
    };
    let request_arms = bound.iter().filter(|b| b.request).map(|b| {
        let (ident, method, side) = (&b.ident, &b.method, side(b.from));
        quote! {
            (#side, #method) => {
                let call = #krate::proxy::ProxiedRequest::new(cx, from, req)?;
                #krate::proxy::answer(self.#ident(call).await)
            }
        }
    });
    let notification_arms = bound.iter().filter(|b| !b.request).map(|b| {
        let (ident, method, side) = (&b.ident, &b.method, side(b.from));
        quote! {
            (#side, #method) => match #krate::proxy::ProxiedNotification::new(cx, from, notification) {
                Ok(call) => self.#ident(call).await,
                Err(undecodable) => undecodable.pass_on().await,
            },
        }
    });
    quote! {
        impl #impl_generics #krate::proxy::Proxy for #self_ty #where_clause {
            fn intercepts(&self, from: #krate::proxy::Side, method: &str) -> bool {
                match from {
                    #krate::proxy::Side::Client => #client,
                    #krate::proxy::Side::Agent => #agent,
                }
            }

            async fn handle_request(
                &self,
                cx: #krate::proxy::ProxyContext,
                from: #krate::proxy::Side,
                req: #krate::IncomingRequest,
            ) -> ::core::result::Result<::std::boxed::Box<#krate::RawValue>, #krate::ErrorObject> {
                match (from, &*req.method) {
                    #(#request_arms)*
                    _ => cx.forward_request(from, req).await,
                }
            }

            async fn handle_notification(
                &self,
                cx: #krate::proxy::ProxyContext,
                from: #krate::proxy::Side,
                notification: #krate::IncomingNotification,
            ) {
                match (from, &*notification.method) {
                    #(#notification_arms)*
                    _ => cx.forward_notification(from, notification).await,
                }
            }
        }
    }
}
