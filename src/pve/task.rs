//! Waiting for PVE tasks.
//!
//! Every asynchronous API call answers with a UPID
//! (`UPID:NODE:PID:PSTART:STARTTIME:TYPE:ID:USER:`). [`PveClient::wait_task`] polls
//! `GET /nodes/{node}/tasks/{upid}/status` with capped exponential backoff (immediately, then
//! 50 ms doubling up to 2 s) until `status == "stopped"`. Success is `exitstatus == "OK"` or one
//! starting with `WARNINGS` (the warning lines of the log are returned); anything else is a
//! [`PveError::Task`] carrying the tail of `GET /nodes/{node}/tasks/{upid}/log`.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{PveClient, PveError};

/// How many log lines a failed task's error carries.
pub const LOG_TAIL_LINES: usize = 20;

/// A finished, successful task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskOutcome {
    /// The UPID.
    pub upid: String,
    /// `OK` or `WARNINGS: n`.
    pub exit_status: String,
    /// The `WARN…` lines of the log when the exit status says WARNINGS.
    pub warnings: Vec<String>,
    /// Wall time waited.
    pub duration: Duration,
}

/// The node in a UPID (`UPID:NODE:…`), if it parses.
pub fn upid_node(upid: &str) -> Option<&str> {
    let mut parts = upid.split(':');
    (parts.next() == Some("UPID")).then(|| parts.next()).flatten().filter(|n| !n.is_empty())
}

impl PveClient {
    /// Waits until the task `upid` stops, for at most `timeout`.
    ///
    /// # Errors
    /// [`PveError::Task`] when it ended with an error (with the log tail), [`PveError::Timeout`]
    /// when it is still running after `timeout` (it is *not* stopped), API/transport errors of the
    /// status calls, [`PveError::Decode`] for a malformed UPID.
    pub async fn wait_task(&self, upid: &str, timeout: Duration, what: &str) -> Result<TaskOutcome, PveError> {
        let node = upid_node(upid).ok_or_else(|| PveError::Decode {
            method: "POST".into(),
            path: what.into(),
            detail: format!("`{upid}` is not a UPID"),
        })?;
        let status_path = format!("/nodes/{node}/tasks/{upid}/status");
        let start = Instant::now();
        let mut delay = Duration::from_millis(50);
        let mut wait: Option<crate::progress::Wait> = None;
        loop {
            let st = self.get(&status_path, &[]).await?;
            let status = st.get("status").and_then(Value::as_str).unwrap_or("");
            if status == "stopped" {
                let exit = st.get("exitstatus").and_then(Value::as_str).unwrap_or("unknown").to_string();
                let duration = start.elapsed();
                if let Some(w) = wait.take() {
                    w.finish(&exit);
                }
                if exit == "OK" {
                    return Ok(TaskOutcome { upid: upid.into(), exit_status: exit, warnings: vec![], duration });
                }
                let log = self.task_log(node, upid).await.unwrap_or_default();
                if exit.starts_with("WARNINGS") {
                    let mut warnings: Vec<String> = log.iter().filter(|l| l.starts_with("WARN")).cloned().collect();
                    if warnings.is_empty() {
                        warnings.push(format!("{what}: task ended with {exit}"));
                    }
                    return Ok(TaskOutcome { upid: upid.into(), exit_status: exit, warnings, duration });
                }
                let tail = log[log.len().saturating_sub(LOG_TAIL_LINES)..].to_vec();
                return Err(PveError::Task {
                    upid: upid.into(),
                    exit_status: crate::actions::redact(&exit),
                    log_tail: tail,
                });
            }
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Err(PveError::Timeout { what: format!("{what} ({upid})"), secs: timeout.as_secs() });
            }
            let w = wait.get_or_insert_with(|| crate::progress::Wait::start(format!("{what} ({upid})")));
            w.state(if status.is_empty() { "waiting" } else { status });
            tokio::time::sleep(delay.min(timeout - elapsed)).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    /// The task's log lines (`GET /nodes/{node}/tasks/{upid}/log`, up to 5000 lines), redacted.
    ///
    /// # Errors
    /// API and transport errors.
    pub async fn task_log(&self, node: &str, upid: &str) -> Result<Vec<String>, PveError> {
        let data = self
            .get(&format!("/nodes/{node}/tasks/{upid}/log"), &[("start", "0".into()), ("limit", "5000".into())])
            .await?;
        Ok(data
            .as_array()
            .map(|a| a.iter().filter_map(|l| l.get("t").and_then(Value::as_str)).map(crate::actions::redact).collect())
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_of_upids() {
        assert_eq!(upid_node("UPID:pve1:000003E9:00001B5F:6B0DA64A:vzcreate:101:root@pam:"), Some("pve1"));
        assert_eq!(upid_node("nope"), None);
        assert_eq!(upid_node("UPID::x"), None);
    }
}
