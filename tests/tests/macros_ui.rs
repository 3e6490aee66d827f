//! `#[acp_agent]` / `#[acp_client]` misuse is a compile error that points at the user's code and
//! says how to fix it; correct use compiles. The expected messages are in `ui/fail/*.stderr`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}
