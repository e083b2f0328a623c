//! Reading Ansible's JSON callback output: one log line per task and the host's recap.

/// A host's recap: `(changed, ok, failed-or-unreachable)`.
pub(super) type Recap = (Option<u64>, Option<u64>, bool);

/// Turns the JSON callback's output into one log line per task (plus the failure details) and
/// the host's recap: `(changed, ok, failed-or-unreachable)`.
pub(super) fn summarize(stdout: &str, host: &str) -> (Vec<String>, Option<Recap>) {
    let json_start = stdout.find('{').unwrap_or(0);
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&stdout[json_start..]) else {
        return (Vec::new(), None);
    };
    let mut lines = Vec::new();
    for play in v["plays"].as_array().into_iter().flatten() {
        lines.push(format!("PLAY [{}]", play["play"]["name"].as_str().unwrap_or("")));
        for task in play["tasks"].as_array().into_iter().flatten() {
            let name = task["task"]["name"].as_str().unwrap_or("");
            let r = &task["hosts"][host];
            if r.is_null() {
                continue;
            }
            let status = if r["unreachable"].as_bool() == Some(true) {
                "unreachable"
            } else if r["failed"].as_bool() == Some(true) {
                "failed"
            } else if r["skipped"].as_bool() == Some(true) {
                "skipped"
            } else if r["changed"].as_bool() == Some(true) {
                "changed"
            } else {
                "ok"
            };
            lines.push(format!("TASK [{name}] {status}"));
            if status == "failed" || status == "unreachable" {
                for key in ["msg", "stderr", "stdout", "module_stderr", "module_stdout"] {
                    if let Some(s) = r[key].as_str().filter(|s| !s.trim().is_empty()) {
                        for l in s.lines() {
                            lines.push(format!("  {key}: {l}"));
                        }
                    }
                }
                for res in r["results"].as_array().into_iter().flatten() {
                    if let (Some(true), Some(m)) = (res["failed"].as_bool(), res["msg"].as_str()) {
                        lines.push(format!("  item: {m}"));
                    }
                }
            }
        }
    }
    let s = &v["stats"][host];
    if s.is_null() {
        return (lines, None);
    }
    let changed = s["changed"].as_u64();
    let ok = s["ok"].as_u64();
    let bad = s["failures"].as_u64().unwrap_or(0) > 0 || s["unreachable"].as_u64().unwrap_or(0) > 0;
    lines.push(format!(
        "RECAP {host}: ok={} changed={} failed={} unreachable={}",
        ok.unwrap_or(0),
        changed.unwrap_or(0),
        s["failures"].as_u64().unwrap_or(0),
        s["unreachable"].as_u64().unwrap_or(0)
    ));
    (lines, Some((changed, ok, bad)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recap_from_json_callback() {
        let json = r#"{"plays":[{"play":{"name":"base"},"tasks":[
            {"task":{"name":"a"},"hosts":{"h":{"changed":true}}},
            {"task":{"name":"b"},"hosts":{"h":{"failed":true,"msg":"boom"}}}]}],
            "stats":{"h":{"changed":1,"failures":1,"ok":1,"unreachable":0,"skipped":0}}}"#;
        let (lines, stats) = summarize(json, "h");
        assert_eq!(
            lines,
            vec![
                "PLAY [base]",
                "TASK [a] changed",
                "TASK [b] failed",
                "  msg: boom",
                "RECAP h: ok=1 changed=1 failed=1 unreachable=0"
            ]
        );
        assert_eq!(stats, Some((Some(1), Some(1), true)));
        assert_eq!(summarize("not json", "h"), (Vec::new(), None));
    }
}
