//! The `tool_turn` example (one v1 turn with a tool call, a permission request and a file
//! read), run in-process so that it cannot rot: the book's agents chapter includes its code.

#[allow(dead_code)] // its `main` is the example's, not this test's
#[path = "../examples/tool_turn.rs"]
mod tool_turn;

#[tokio::test]
async fn the_tool_turn_example_runs_its_turn_in_order() {
    let lines = tokio::time::timeout(std::time::Duration::from_secs(10), tool_turn::run())
        .await
        .expect("the turn ends")
        .expect("the turn succeeds");
    assert_eq!(
        lines,
        [
            "tool call call_1: Read /project/notes.txt (pending)",
            "permission for call_1: selected allow",
            "tool call call_1: in_progress",
            "fs/read_text_file /project/notes.txt",
            "tool call call_1: completed",
            "agent: /project/notes.txt starts with “Buy milk.”.",
            "stop reason: end_turn",
        ]
    );
}
