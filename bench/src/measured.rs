//! Runs a measured child process to completion and reads the JSON line it prints; the median
//! of what was measured.
//!
//! Peak memory is the child's own `VmHWM` (from `/proc/self/status`, read by the child as it
//! finishes): the kernel's high-water mark of the child's address space after `exec`. The
//! parent's `wait4` `ru_maxrss` would not do: Linux carries the parent's RSS at `fork` into it.

use std::process::{Command, Stdio};

/// Runs `cmd` (stdout captured, stderr passed through) and returns its last output line as
/// JSON; an error unless it exits 0.
pub fn run(cmd: &mut Command) -> Result<serde_json::Value, String> {
    let what = format!("{cmd:?}");
    let out = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot start {what}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("{what} failed ({}); output: {stdout}", out.status));
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    serde_json::from_str(line)
        .map_err(|e| format!("{what}: expected a JSON line, got {line:?}: {e}"))
}

/// This process's peak resident set size so far, in KiB (`VmHWM`).
pub fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The middle value (mean of the two middle ones for an even count).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }
}
