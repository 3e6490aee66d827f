//! `syn` nodes built directly rather than parsed from tokens, for the generator's most frequent
//! item: a struct with its constructor, setters and `Deserialize` (see `emit::structure`),
//! two thirds of the items and of the functions it writes. Parsing their tokens back was the
//! larger part of syn's time; these helpers make the nodes that parsing would make, so
//! prettyplease prints the same text.

use proc_macro2::{Ident, Span, TokenStream};
use syn::punctuated::Punctuated;

use super::docs;

fn span() -> Span {
    Span::call_site()
}

/// A path without generic arguments: `serde_json::Value`, `Some`.
pub fn path(segments: &[&str]) -> syn::Path {
    syn::Path {
        leading_colon: None,
        segments: segments.iter().map(|s| syn::PathSegment::from(Ident::new(s, span()))).collect(),
    }
}

/// A path whose last segment takes generic arguments: `Vec<T>`, `Into<T>`.
pub fn generic_path(segments: &[&str], args: Vec<syn::Type>) -> syn::Path {
    let mut path = path(segments);
    if let Some(last) = path.segments.last_mut() {
        last.arguments = syn::PathArguments::AngleBracketed(syn::AngleBracketedGenericArguments {
            colon2_token: None,
            lt_token: Default::default(),
            args: args.into_iter().map(syn::GenericArgument::Type).collect(),
            gt_token: Default::default(),
        });
    }
    path
}

pub fn path_ty(path: syn::Path) -> syn::Type {
    syn::Type::Path(syn::TypePath { qself: None, path })
}

/// `()`.
pub fn unit_ty() -> syn::Type {
    syn::Type::Tuple(syn::TypeTuple { paren_token: Default::default(), elems: Punctuated::new() })
}

/// `impl Into<ty>`.
pub fn impl_into(ty: syn::Type) -> syn::Type {
    let bound = syn::TraitBound {
        paren_token: None,
        modifier: syn::TraitBoundModifier::None,
        lifetimes: None,
        path: generic_path(&["Into"], vec![ty]),
    };
    syn::Type::ImplTrait(syn::TypeImplTrait {
        impl_token: Default::default(),
        bounds: std::iter::once(syn::TypeParamBound::Trait(bound)).collect(),
    })
}

fn attr(meta: syn::Meta) -> syn::Attribute {
    syn::Attribute {
        pound_token: Default::default(),
        style: syn::AttrStyle::Outer,
        bracket_token: Default::default(),
        meta,
    }
}

/// `#[name]`.
pub fn attr_word(name: &str) -> syn::Attribute {
    attr(syn::Meta::Path(path(&[name])))
}

/// `#[name(tokens)]`.
pub fn attr_list(name: &str, tokens: TokenStream) -> syn::Attribute {
    attr(syn::Meta::List(syn::MetaList {
        path: path(&[name]),
        delimiter: syn::MacroDelimiter::Paren(Default::default()),
        tokens,
    }))
}

/// `#[doc = "text"]`.
fn attr_doc(text: &str) -> syn::Attribute {
    let lit = syn::Expr::Lit(syn::ExprLit { attrs: Vec::new(), lit: syn::Lit::Str(syn::LitStr::new(text, span())) });
    attr(syn::Meta::NameValue(syn::MetaNameValue { path: path(&["doc"]), eq_token: Default::default(), value: lit }))
}

/// Doc attributes from a description: one per line (so rustdoc sees the markdown), or one
/// placeholder while descriptions are deferred ([`docs`]).
pub fn doc_attrs(text: Option<&str>) -> Vec<syn::Attribute> {
    let Some(text) = text else { return Vec::new() };
    if let Some(mark) = docs::placeholder(text) {
        return vec![attr_doc(&mark)];
    }
    text.lines().map(|l| if l.is_empty() { attr_doc("") } else { attr_doc(&format!(" {l}")) }).collect()
}

pub fn expr_path(path: syn::Path) -> syn::Expr {
    syn::Expr::Path(syn::ExprPath { attrs: Vec::new(), qself: None, path })
}

pub fn expr_ident(ident: &Ident) -> syn::Expr {
    expr_path(syn::Path::from(ident.clone()))
}

/// `func(arg)`.
pub fn expr_call(func: &str, arg: syn::Expr) -> syn::Expr {
    syn::Expr::Call(syn::ExprCall {
        attrs: Vec::new(),
        func: Box::new(expr_path(path(&[func]))),
        paren_token: Default::default(),
        args: std::iter::once(arg).collect(),
    })
}

/// `receiver.method()`.
pub fn expr_method(receiver: syn::Expr, method: &str) -> syn::Expr {
    syn::Expr::MethodCall(syn::ExprMethodCall {
        attrs: Vec::new(),
        receiver: Box::new(receiver),
        dot_token: Default::default(),
        method: Ident::new(method, span()),
        turbofish: None,
        paren_token: Default::default(),
        args: Punctuated::new(),
    })
}

/// `self.field = value`.
pub fn expr_assign_self_field(field: &Ident, value: syn::Expr) -> syn::Expr {
    let left = syn::Expr::Field(syn::ExprField {
        attrs: Vec::new(),
        base: Box::new(expr_path(path(&["self"]))),
        dot_token: Default::default(),
        member: syn::Member::Named(field.clone()),
    });
    syn::Expr::Assign(syn::ExprAssign {
        attrs: Vec::new(),
        left: Box::new(left),
        eq_token: Default::default(),
        right: Box::new(value),
    })
}

/// `Name { field: value, ... }`, each field with its attributes.
pub fn expr_struct(name: &Ident, fields: Vec<(Vec<syn::Attribute>, Ident, syn::Expr)>) -> syn::Expr {
    let fields = fields.into_iter().map(|(attrs, member, expr)| {
        // `field` rather than `field: field`, as hand-written code (and clippy) would have it.
        let shorthand = matches!(&expr, syn::Expr::Path(p) if p.qself.is_none() && p.path.is_ident(&member));
        syn::FieldValue {
            attrs,
            member: syn::Member::Named(member),
            colon_token: (!shorthand).then(Default::default),
            expr,
        }
    });
    syn::Expr::Struct(syn::ExprStruct {
        attrs: Vec::new(),
        qself: None,
        path: syn::Path::from(name.clone()),
        brace_token: Default::default(),
        fields: fields.collect(),
        dot2_token: None,
        rest: None,
    })
}

/// A function parameter `name: ty`, with its attributes.
pub fn param(attrs: Vec<syn::Attribute>, name: &Ident, ty: syn::Type) -> syn::FnArg {
    let pat = syn::Pat::Ident(syn::PatIdent {
        attrs: Vec::new(),
        by_ref: None,
        mutability: None,
        ident: name.clone(),
        subpat: None,
    });
    syn::FnArg::Typed(syn::PatType { attrs, pat: Box::new(pat), colon_token: Default::default(), ty: Box::new(ty) })
}

/// `mut self`.
pub fn mut_self() -> syn::FnArg {
    syn::FnArg::Receiver(syn::Receiver {
        attrs: Vec::new(),
        reference: None,
        mutability: Some(Default::default()),
        self_token: Default::default(),
        colon_token: None,
        ty: Box::new(path_ty(path(&["Self"]))),
    })
}

/// `pub fn name(inputs) -> Self { stmts }`; a statement is an expression and whether a `;`
/// ends it.
pub fn pub_fn_returning_self(
    attrs: Vec<syn::Attribute>,
    name: &Ident,
    inputs: Vec<syn::FnArg>,
    stmts: Vec<(syn::Expr, bool)>,
) -> syn::ImplItem {
    let sig = syn::Signature {
        constness: None,
        asyncness: None,
        unsafety: None,
        abi: None,
        fn_token: Default::default(),
        ident: name.clone(),
        generics: syn::Generics::default(),
        paren_token: Default::default(),
        inputs: inputs.into_iter().collect(),
        variadic: None,
        output: syn::ReturnType::Type(Default::default(), Box::new(path_ty(path(&["Self"])))),
    };
    let stmts = stmts.into_iter().map(|(expr, semi)| syn::Stmt::Expr(expr, semi.then(Default::default))).collect();
    syn::ImplItem::Fn(syn::ImplItemFn {
        attrs,
        vis: syn::Visibility::Public(Default::default()),
        defaultness: None,
        sig,
        block: syn::Block { brace_token: Default::default(), stmts },
    })
}

/// `impl Name { items }`.
pub fn inherent_impl(attrs: Vec<syn::Attribute>, name: &Ident, items: Vec<syn::ImplItem>) -> syn::ItemImpl {
    syn::ItemImpl {
        attrs,
        defaultness: None,
        unsafety: None,
        impl_token: Default::default(),
        generics: syn::Generics::default(),
        trait_: None,
        self_ty: Box::new(path_ty(syn::Path::from(name.clone()))),
        brace_token: Default::default(),
        items,
    }
}

/// A named field `pub name: ty`, with its attributes.
pub fn pub_field(attrs: Vec<syn::Attribute>, name: &Ident, ty: syn::Type) -> syn::Field {
    syn::Field {
        attrs,
        vis: syn::Visibility::Public(Default::default()),
        mutability: syn::FieldMutability::None,
        ident: Some(name.clone()),
        colon_token: Some(Default::default()),
        ty,
    }
}

/// `pub struct Name { fields }`.
pub fn pub_struct(attrs: Vec<syn::Attribute>, name: &Ident, fields: Vec<syn::Field>) -> syn::ItemStruct {
    syn::ItemStruct {
        attrs,
        vis: syn::Visibility::Public(Default::default()),
        struct_token: Default::default(),
        ident: name.clone(),
        generics: syn::Generics::default(),
        fields: syn::Fields::Named(syn::FieldsNamed {
            brace_token: Default::default(),
            named: fields.into_iter().collect(),
        }),
        semi_token: None,
    }
}

/// `path!(tokens);` as an item.
pub fn macro_call(attrs: Vec<syn::Attribute>, path_segments: &[&str], tokens: TokenStream) -> syn::ItemMacro {
    syn::ItemMacro {
        attrs,
        ident: None,
        mac: syn::Macro {
            path: path(path_segments),
            bang_token: Default::default(),
            delimiter: syn::MacroDelimiter::Paren(Default::default()),
            tokens,
        },
        semi_token: Some(Default::default()),
    }
}
