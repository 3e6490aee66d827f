//! The expansion of `#[acp_agent]` / `#[acp_client]`: validate the impl block against the
//! generated handler table, then implement the generated trait by forwarding to it.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ImplItem, ImplItemFn, ItemImpl, LitStr, ReceiverKind, ReturnType};

use crate::table::{self, Capability, Handler};

#[derive(Clone, Copy)]
pub enum Side {
    Agent,
    Client,
}

impl Side {
    fn handlers(self) -> &'static [Handler] {
        match self {
            Side::Agent => table::AGENT,
            Side::Client => table::CLIENT,
        }
    }

    fn capabilities(self) -> &'static [Capability] {
        match self {
            Side::Agent => table::AGENT_CAPABILITIES,
            Side::Client => table::CLIENT_CAPABILITIES,
        }
    }

    fn names(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Side::Agent => ("acp_agent", "Agent", "AgentContext"),
            Side::Client => ("acp_client", "Client", "ClientContext"),
        }
    }
}

/// Collects every error, so the user sees all of them at once.
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

/// One function of the block, bound to a method.
struct Bound<'a> {
    func: &'a ImplItemFn,
    /// `None` for extension methods.
    handler: Option<&'static Handler>,
    ext: Option<(LitStr, bool)>,
    takes_cx: bool,
}

pub fn expand(side: Side, attr: TokenStream, item: TokenStream) -> TokenStream {
    let (macro_name, _, _) = side.names();
    let mut errors = Errors::default();
    let krate = parse_attr(attr, macro_name, &mut errors);
    let mut block: ItemImpl = match syn::parse2(item.clone()) {
        Ok(b) => b,
        Err(e) => {
            let mut e = e;
            e.combine(syn::Error::new(Span::call_site(), format!("#[{macro_name}] goes on an inherent impl block")));
            return e.to_compile_error();
        }
    };
    if let Some((path, _)) = &block.trait_ {
        errors.push(path.span(), format!("#[{macro_name}] goes on an inherent impl block (`impl MyPeer {{ .. }}`), not a trait impl"));
        let e = errors.0.map(|e| e.to_compile_error());
        return quote!(#e #block);
    }
    if !block.generics.params.is_empty() {
        errors.push(block.generics.span(), format!("#[{macro_name}] does not support generic impl blocks"));
    }

    // Take the `#[ext("_name")]` attributes off before the block is emitted again.
    let mut exts: Vec<Option<(LitStr, bool)>> = Vec::new();
    for it in &mut block.items {
        if let ImplItem::Fn(f) = it {
            exts.push(take_ext(f, &mut errors));
        }
    }

    let bound = bind(side, &block, exts, &mut errors);
    check_missing(side, &block, &bound, &mut errors);
    if let Some(e) = errors.0 {
        // Keep the block so the user's own code still type-checks and reports its errors.
        let e = e.to_compile_error();
        return quote!(#e #block);
    }
    let imp = implement(side, &krate, &block, &bound);
    quote! {
        #block
        #imp
    }
}

/// `#[acp_agent]` or `#[acp_agent(crate = path)]`.
fn parse_attr(attr: TokenStream, macro_name: &str, errors: &mut Errors) -> syn::Path {
    let mut krate: syn::Path = syn::parse_quote!(::acp_runtime);
    if attr.is_empty() {
        return krate;
    }
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("crate") {
            krate = meta.value()?.parse::<LitStr>()?.parse()?;
            Ok(())
        } else {
            let key = meta.path.get_ident().map(|i| i.to_string()).unwrap_or_else(|| "?".into());
            Err(meta.error(format!("unknown #[{macro_name}] key `{key}`; the only key is `crate = \"path::to::acp_runtime\"`")))
        }
    });
    if let Err(e) = syn::parse::Parser::parse2(parser, attr) {
        errors.push(e.span(), e);
    }
    krate
}

/// Removes `#[ext("_name")]` from a function; returns the name, and whether it is valid.
fn take_ext(f: &mut ImplItemFn, errors: &mut Errors) -> Option<(LitStr, bool)> {
    let pos = f.attrs.iter().position(|a| a.path().is_ident("ext"))?;
    let attr = f.attrs.remove(pos);
    match attr.parse_args::<LitStr>() {
        Ok(name) => {
            let valid = name.value().starts_with('_');
            if !valid {
                errors.push(
                    name.span(),
                    format!("extension method names start with `_` (e.g. \"_{}\"), so they cannot clash with the protocol's", name.value()),
                );
            }
            Some((name, valid))
        }
        Err(e) => {
            errors.push(attr.span(), format!("expected #[ext(\"_vendor/method\")]: {e}"));
            None
        }
    }
}

fn bind<'a>(side: Side, block: &'a ItemImpl, exts: Vec<Option<(LitStr, bool)>>, errors: &mut Errors) -> Vec<Bound<'a>> {
    let (_, _, cx_name) = side.names();
    let fns = block.items.iter().filter_map(|it| match it {
        ImplItem::Fn(f) => Some(f),
        _ => None,
    });
    let mut bound: Vec<Bound> = Vec::new();
    for (f, ext) in fns.zip(exts) {
        let name = f.sig.ident.to_string();
        let handler = if ext.is_some() { None } else { side.handlers().iter().find(|h| h.name == name) };
        if ext.is_none() && handler.is_none() {
            errors.push(f.sig.ident.span(), unknown_name(side, &name));
            continue;
        }
        // The signature: `async fn name(&self, params: P[, cx: Context]) -> Result<R, E>`.
        if f.sig.asyncness.is_none() {
            errors.push(f.sig.fn_token.span(), format!("handler `{name}` must be an `async fn`"));
        }
        if !f.sig.generics.params.is_empty() {
            errors.push(f.sig.generics.span(), format!("handler `{name}` cannot be generic"));
        }
        let mut inputs = f.sig.inputs.iter();
        match inputs.next() {
            Some(FnArg::Receiver(r)) if !matches!(r.kind, ReceiverKind::Reference(_, _, None)) => errors.push(
                r.span(),
                format!("handler `{name}` takes `&self`: requests run concurrently, so use interior mutability (a Mutex, atomics) for state"),
            ),
            Some(FnArg::Receiver(_)) => {}
            _ => errors.push(f.sig.ident.span(), format!("handler `{name}` takes `&self` first")),
        }
        let rest: Vec<&FnArg> = inputs.collect();
        if rest.is_empty() || rest.len() > 2 {
            errors.push(
                f.sig.inputs.span(),
                format!("handler `{name}` takes `&self`, its params, and optionally `cx: {cx_name}`"),
            );
        }
        let returns_result = handler.is_some_and(|h| h.response.is_some()) || ext.is_some();
        if returns_result && matches!(f.sig.output, ReturnType::Default) {
            errors.push(f.sig.ident.span(), format!("handler `{name}` returns `Result<_, acp_types::Error>`"));
        }
        if let Some((lit, _)) = &ext {
            if let Some(prev) = bound.iter().find(|b| b.ext.as_ref().is_some_and(|(l, _)| l.value() == lit.value())) {
                errors.push(
                    lit.span(),
                    format!("`{}` is already handled by `{}`; two functions cannot handle one method", lit.value(), prev.func.sig.ident),
                );
            }
        }
        bound.push(Bound { func: f, handler, ext, takes_cx: rest.len() == 2 });
    }
    bound
}

fn unknown_name(side: Side, name: &str) -> String {
    let (macro_name, _, _) = side.names();
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
        listed.push_str(";\n       with acp-types features: ");
        listed.push_str(&gated.join(", "));
    }
    let best = valid.iter().map(|v| (distance(name, v), *v)).min().filter(|(d, v)| *d <= v.len().max(name.len()) / 3 + 1);
    let hint = match best {
        Some((_, v)) => format!("did you mean `{v}`? "),
        None => String::new(),
    };
    format!(
        "`{name}` is not a method #[{macro_name}] handles; {hint}the handlers are: {}.\n\
         Put helper functions in a separate impl block, and bind extension methods with #[ext(\"_vendor/method\")]",
        listed
    )
}

/// Edit distance, for "did you mean".
fn distance(a: &str, b: &str) -> usize {
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
    let missing: Vec<String> = side
        .handlers()
        .iter()
        .filter(|h| h.baseline && !bound.iter().any(|b| b.handler.is_some_and(|bh| bh.name == h.name)))
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
}

fn implement(side: Side, krate: &syn::Path, block: &ItemImpl, bound: &[Bound]) -> TokenStream {
    let (_, trait_name, cx_name) = side.names();
    let self_ty = &block.self_ty;
    let trait_ident = format_ident!("{trait_name}");
    let cx_ident = format_ident!("{cx_name}");
    let types = quote!(#krate::acp_types);
    let cx_ty = quote!(#krate::#cx_ident);
    let handled: Vec<&str> = bound.iter().filter_map(|b| b.handler.map(|h| h.method)).collect();
    let earned: Vec<&Capability> =
        side.capabilities().iter().filter(|c| c.methods.iter().all(|m| handled.contains(m))).collect();
    let cap_rows = earned.iter().map(|c| {
        let path = c.path;
        let object = c.object;
        quote!((&[#(#path),*], #object))
    });
    let capabilities = quote!(&[#(#cap_rows),*]);

    let mut methods = Vec::new();
    for b in bound.iter().filter(|b| b.handler.is_some()) {
        let h = b.handler.expect("filtered");
        let f = &b.func.sig.ident;
        let params = format_ident!("{}", h.params);
        let span = b.func.sig.span();
        // Spanned at the user's parameter, so a type mismatch points there.
        let params_span = b.func.sig.inputs.iter().nth(1).map(|a| a.span()).unwrap_or(span);
        let params_arg = quote_spanned!(params_span=> params);
        let call_args = if b.takes_cx { quote!(#params_arg, cx) } else { quote!(#params_arg) };
        let unused_cx = if b.takes_cx { quote!() } else { quote!(let _ = cx;) };
        let call = quote_spanned!(span=> <#self_ty>::#f(self, #call_args).await);
        let (output, body) = match h.response {
            Some(r) => {
                let r = format_ident!("{r}");
                let body = if h.method == "initialize" && matches!(side, Side::Agent) {
                    quote! {
                        #krate::macro_support::earn(&cx, #capabilities);
                        #call.map_err(::core::convert::Into::<#types::Error>::into)
                    }
                } else {
                    quote!(#call.map_err(::core::convert::Into::<#types::Error>::into))
                };
                (quote!(::core::result::Result<#types::#r, #types::Error>), body)
            }
            None => (quote!(::core::result::Result<(), #types::Error>), quote!(#call.map_err(::core::convert::Into::<#types::Error>::into))),
        };
        methods.push(quote_spanned! {span=>
            #[allow(clippy::manual_async_fn)]
            fn #f(&self, params: #types::#params, cx: #cx_ty)
                -> impl ::core::future::Future<Output = #output> + ::core::marker::Send {
                async move {
                    #unused_cx
                    #body
                }
            }
        });
    }

    let ext_arms: Vec<TokenStream> = bound
        .iter()
        .filter_map(|b| b.ext.as_ref().map(|(lit, _)| (b, lit)))
        .map(|(b, lit)| {
            let f = &b.func.sig.ident;
            let span = b.func.sig.span();
            let call_args = if b.takes_cx { quote!(params, cx) } else { quote!(params) };
            quote_spanned! {span=>
                #lit => {
                    let params = #krate::macro_support::ext_params(params)?;
                    let result = <#self_ty>::#f(self, #call_args).await.map_err(::core::convert::Into::<#types::Error>::into)?;
                    #krate::macro_support::ext_result(result)
                }
            }
        })
        .collect();
    let ext_method = if ext_arms.is_empty() {
        quote!()
    } else {
        quote! {
            #[allow(clippy::manual_async_fn)]
            fn ext_method(&self, method: &str, params: #types::ExtRequest, cx: #cx_ty)
                -> impl ::core::future::Future<Output = ::core::result::Result<#types::ExtResponse, #types::Error>> + ::core::marker::Send {
                let method = method.to_owned();
                async move {
                    let _ = &cx;
                    match method.as_str() {
                        #(#ext_arms)*
                        other => ::core::result::Result::Err(#types::Error::method_not_found().data(#krate::macro_support::Value::from(other))),
                    }
                }
            }
        }
    };

    quote! {
        impl #types::#trait_ident<#cx_ty> for #self_ty {
            #(#methods)*
            #ext_method
        }

        impl #krate::macro_support::Advertise for #self_ty {
            const CAPABILITIES: &'static [(&'static [&'static str], bool)] = #capabilities;
        }
    }
}
