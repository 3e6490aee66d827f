//! The compatibility table (in the book's `compatibility.md`), rendered from the results `run` saved: one row per agent
//! of the manifest, in its order, and the notes under it. Pure functions of the JSON, so that
//! the rendering is tested without installing anything.

use serde_json::Value;

/// The markers between which the table lives on that page.
pub const BEGIN: &str = "<!-- compat:begin -->";
pub const END: &str = "<!-- compat:end -->";

/// How long a check's detail may be in a cell.
const DETAIL_CHARS: usize = 220;
/// How many failed MUSTs a row details; the others are named.
const LISTED_FAILURES: usize = 3;

/// The table, its notes and the runtimes the agents ran on, for the manifest's agents (`agents`
/// in `manifest`), each with its saved result (`None`: never run).
pub fn render(manifest: &Value, results: &[Option<Value>]) -> String {
    let agents = manifest["agents"].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut out = String::new();
    out.push_str("| Agent | Version | Serves | Verdict | MUSTs that fail | Checked |\n");
    out.push_str("| --- | --- | --- | --- | --- | --- |\n");
    let mut notes = Vec::new();
    let mut runtimes: Vec<String> = Vec::new();
    for (agent, result) in agents.iter().zip(results) {
        let label = agent["label"].as_str().unwrap_or("?");
        let version = format!("{} ({})", version_of(agent), source_of(agent));
        let (served, verdict, fails, date) = match result {
            None => ("—".to_owned(), "not run yet".to_owned(), String::new(), "—".to_owned()),
            Some(result) => (served(result), verdict(result), failed_musts(result), date(result)),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            label,
            cell(&version),
            cell(&served),
            verdict,
            if fails.is_empty() { "—".to_owned() } else { fails },
            cell(&date)
        ));
        if let Some(note) = agent["note"].as_str() {
            notes.push(format!("- {label}: {note}"));
        }
        if let Some(runtime) = result.as_ref().and_then(|r| r["runtime"].as_str()) {
            if !runtimes.iter().any(|r| r == runtime) {
                runtimes.push(runtime.to_owned());
            }
        }
    }
    if !runtimes.is_empty() {
        out.push_str(&format!("\nRun on {}.\n", runtimes.join(", ")));
    }
    if !notes.is_empty() {
        out.push('\n');
        out.push_str(&notes.join("\n"));
        out.push('\n');
    }
    out
}

/// `text` with the table written between the markers (which stay), or why not.
pub fn splice(text: &str, table: &str) -> Result<String, String> {
    let begin = text.find(BEGIN).ok_or_else(|| format!("no {BEGIN} marker"))?;
    let after_begin = begin + BEGIN.len();
    let end = text[after_begin..].find(END).ok_or_else(|| format!("no {END} marker after {BEGIN}"))? + after_begin;
    Ok(format!("{}\n{}{}", &text[..after_begin], table, &text[end..]))
}

/// The version the manifest pins.
pub fn version_of(agent: &Value) -> &str {
    agent["install"]["version"].as_str().unwrap_or("?")
}

/// The registry the agent comes from.
pub fn source_of(agent: &Value) -> &'static str {
    let install = &agent["install"];
    if install.get("npm").is_some() {
        "npm"
    } else if install.get("pypi").is_some() {
        "PyPI"
    } else if install.get("crate").is_some() {
        "crates.io"
    } else {
        "?"
    }
}

fn report(result: &Value) -> Option<&Value> {
    result.get("report").filter(|r| r.is_object())
}

fn served(result: &Value) -> String {
    let Some(report) = report(result).filter(|r| r["error"].is_null()) else { return "—".to_owned() };
    match report["versions"]["served"].as_array() {
        Some(served) if !served.is_empty() => served.iter().map(Value::to_string).collect::<Vec<_>>().join(", "),
        _ => "none".to_owned(),
    }
}

fn date(result: &Value) -> String {
    result["date"].as_str().unwrap_or("—").to_owned()
}

/// The checks of `report` with this status and, if given, this level.
fn checks<'a>(report: &'a Value, status: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    report["checks"].as_array().map(Vec::as_slice).unwrap_or_default().iter().filter(move |c| c["status"] == status)
}

/// The verdict, as a table cell: not installable, could not start or be checked, failed,
/// stopped at authentication, or passed; then how many checks passed, failed, warned and were
/// skipped.
pub fn verdict(result: &Value) -> String {
    if let Some(why) = result["install_error"].as_str() {
        return format!("not installable here: {}", cell(&one_line(why, DETAIL_CHARS)));
    }
    let Some(report) = report(result) else {
        let why = result["run_error"].as_str().unwrap_or("no report");
        return format!("not checked: {}", cell(&one_line(why, DETAIL_CHARS)));
    };
    if let Some(error) = report["error"].as_str() {
        return format!("could not start: {}", cell(&one_line(error, DETAIL_CHARS)));
    }
    let failed = checks(report, "fail").filter(|c| c["level"] == "MUST").count();
    let stops: Vec<String> = report["auth_required"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|s| format!("v{} {}", s["protocol"], s["method"].as_str().unwrap_or("?")))
        .collect();
    let auth = (!stops.is_empty()).then(|| format!("stopped at auth ({})", cell(&stops.join(", "))));
    let inconclusive = report["checks"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|c| c["level"] == "MUST" && c["inconclusive"] == true)
        .count();
    let mut words = match (failed, auth) {
        (0, None) => "**passed**".to_owned(),
        (0, Some(auth)) => format!("**{auth}**"),
        (n, auth) => {
            let auth = auth.map_or(String::new(), |a| format!("; {a}"));
            format!("**failed** ({n} MUST{}){auth}", if n == 1 { "" } else { "s" })
        }
    };
    if inconclusive > 0 {
        words.push_str(&format!("; {inconclusive} MUST{} inconclusive", if inconclusive == 1 { "" } else { "s" }));
    }
    let count = |status| checks(report, status).count();
    format!("{words}<br>{} pass, {} fail, {} warn, {} skip", count("pass"), count("fail"), count("warn"), count("skip"))
}

/// The failed MUST checks, one per line: `id` (vN): what happened; the first
/// [`LISTED_FAILURES`] of them, and how many more the saved result has.
pub fn failed_musts(result: &Value) -> String {
    let Some(report) = report(result) else { return String::new() };
    let failed: Vec<&Value> = checks(report, "fail").filter(|c| c["level"] == "MUST").collect();
    let mut lines: Vec<String> = failed
        .iter()
        .take(LISTED_FAILURES)
        .map(|c| {
            let id = c["id"].as_str().unwrap_or("?");
            let detail = c["detail"].as_str().unwrap_or("");
            format!("`{id}` (v{}): {}", c["protocol"], cell(&one_line(detail, DETAIL_CHARS)))
        })
        .collect();
    if failed.len() > LISTED_FAILURES {
        let more: Vec<&str> = failed[LISTED_FAILURES..].iter().map(|c| c["id"].as_str().unwrap_or("?")).collect();
        let file = result["id"].as_str().map_or(String::new(), |id| format!(" (check/compat/results/{id}.json)"));
        lines.push(format!("and {}{}", cell(&more.join(", ")), file));
    }
    lines.join("<br>")
}

/// `text` on one line, cut at `max` characters (with an ellipsis).
fn one_line(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= max { line } else { format!("{}…", line.chars().take(max).collect::<String>()) }
}

/// Text made safe for a table cell: no line breaks, no column separators, no HTML.
fn cell(text: &str) -> String {
    let text = one_line(text, usize::MAX);
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(id: &str, protocol: u8, level: &str, status: &str, detail: &str) -> Value {
        json!({"id": id, "protocol": protocol, "level": level, "status": status, "detail": detail,
               "inconclusive": false})
    }

    fn manifest() -> Value {
        json!({"agents": [
            {"id": "a", "label": "`agent-a`", "install": {"npm": "agent-a", "version": "1.2.3"}, "note": "a note"},
            {"id": "b", "label": "`agent_b` example", "install": {"pypi": "agent-b", "version": "0.1.0"}},
            {"id": "c", "label": "`agent-c`", "install": {"crate": "agent-c", "version": "5.0.0"}},
            {"id": "d", "label": "`agent-d`", "install": {"npm": "agent-d", "version": "2.0.0"}},
            {"id": "e", "label": "`agent-e`", "install": {"npm": "agent-e", "version": "0.0.1"}},
        ]})
    }

    #[test]
    fn each_kind_of_result_gets_its_row() {
        let failed = json!({
            "date": "2025-11-24", "runtime": "node v20.20.2",
            "report": {
                "versions": {"served": [1, 2]},
                "auth_required": [{"protocol": 2, "method": "session/new", "authMethods": ["login"]}],
                "checks": [
                    check("initialize", 1, "MUST", "pass", "answered"),
                    check("notifications-unanswered", 1, "MUST", "fail", "3 response(s) | to\nnotifications"),
                    check("malformed-line-answer", 1, "SHOULD", "warn", "ignored"),
                    check("v2-session-new", 2, "MUST", "skip", "the agent requires authentication"),
                ],
            },
        });
        let passed = json!({
            "date": "2025-11-25", "runtime": "Python 3.11.7",
            "report": {"versions": {"served": [1]}, "auth_required": [], "checks": [
                check("initialize", 1, "MUST", "pass", "answered"),
                {"id": "cancel", "protocol": 1, "level": "MUST", "status": "warn", "detail": "inconclusive: early",
                 "inconclusive": true},
            ]},
        });
        let uninstallable = json!({"date": "2025-11-24", "install_error": "npm error 404 Not Found <agent-d>"});
        let unstartable = json!({"date": "2025-11-24", "report": {"error": "cannot start `x`: No such file",
                                                                   "checks": []}});
        let table = render(&manifest(), &[Some(failed), Some(passed), None, Some(uninstallable), Some(unstartable)]);
        let expected = "\
| Agent | Version | Serves | Verdict | MUSTs that fail | Checked |
| --- | --- | --- | --- | --- | --- |
| `agent-a` | 1.2.3 (npm) | 1, 2 | **failed** (1 MUST); stopped at auth (v2 session/new)<br>1 pass, 1 fail, 1 warn, 1 skip | `notifications-unanswered` (v1): 3 response(s) \\| to notifications | 2025-11-24 |
| `agent_b` example | 0.1.0 (PyPI) | 1 | **passed**; 1 MUST inconclusive<br>1 pass, 0 fail, 1 warn, 0 skip | — | 2025-11-25 |
| `agent-c` | 5.0.0 (crates.io) | — | not run yet | — | — |
| `agent-d` | 2.0.0 (npm) | — | not installable here: npm error 404 Not Found &lt;agent-d&gt; | — | 2025-11-24 |
| `agent-e` | 0.0.1 (npm) | — | could not start: cannot start `x`: No such file | — | 2025-11-24 |

Run on node v20.20.2, Python 3.11.7.

- `agent-a`: a note
";
        assert_eq!(table, expected);
    }

    #[test]
    fn stopped_at_auth_without_a_failure_is_its_own_verdict() {
        let result = json!({"report": {"versions": {"served": [1]}, "checks": [
            check("session-new", 1, "MUST", "skip", "auth"),
        ], "auth_required": [{"protocol": 1, "method": "session/new", "authMethods": []}]}});
        assert_eq!(verdict(&result), "**stopped at auth (v1 session/new)**<br>0 pass, 0 fail, 0 warn, 1 skip");
        assert_eq!(failed_musts(&result), "");
        // A failed SHOULD is a warning, not a failed MUST.
        let result = json!({"report": {"checks": [check("malformed-line-answer", 1, "SHOULD", "fail", "x")]}});
        assert!(verdict(&result).starts_with("**passed**"), "{}", verdict(&result));
    }

    #[test]
    fn long_details_are_cut_and_the_table_goes_between_the_markers() {
        let long = "word ".repeat(100);
        let result = json!({"report": {"checks": [check("cancel", 1, "MUST", "fail", &long)]}});
        let cell = failed_musts(&result);
        assert!(cell.starts_with("`cancel` (v1): word word"), "{cell}");
        assert!(cell.ends_with('…') && cell.chars().count() < DETAIL_CHARS + 20, "{cell}");

        let readme = format!("# Title\n\nbefore\n{BEGIN}\nold table\n{END}\nafter\n");
        let spliced = splice(&readme, "| new |\n").unwrap();
        assert_eq!(spliced, format!("# Title\n\nbefore\n{BEGIN}\n| new |\n{END}\nafter\n"));
        // Again: the same text (the markers stay, nothing piles up).
        assert_eq!(splice(&spliced, "| new |\n").unwrap(), spliced);
        assert_eq!(splice("no markers", "x").unwrap_err(), format!("no {BEGIN} marker"));
        assert_eq!(splice(&format!("{BEGIN} only"), "x").unwrap_err(), format!("no {END} marker after {BEGIN}"));
    }

    #[test]
    fn many_failures_are_detailed_up_to_a_few_and_the_rest_named() {
        let checks: Vec<Value> = (1..=5).map(|n| check(&format!("c{n}"), 2, "MUST", "fail", "broken")).collect();
        let result = json!({"id": "x", "report": {"checks": checks}});
        assert_eq!(
            failed_musts(&result),
            "`c1` (v2): broken<br>`c2` (v2): broken<br>`c3` (v2): broken<br>and c4, c5 \
             (check/compat/results/x.json)"
        );
    }
}
