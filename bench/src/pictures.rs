//! The pictures `make bench` draws beside RESULTS.md (issue 37, item 8), from the report's
//! figures: `io.svg`, wall time against batch size, one line per side, one chart per CPU quota;
//! `redrive.svg`, the redriver's rate against SQS's latency per call, one line per design.

use std::path::Path;

use crate::chart::{self, Chart, Points};
use crate::realio::{RealIo, Side};
use crate::scale::Scale;

/// The I/O comparison's file, beside RESULTS.md.
pub const IO_SVG: &str = "io.svg";
/// The redriver's file, beside RESULTS.md.
pub const REDRIVE_SVG: &str = "redrive.svg";

/// A side's name in a legend (the table's, shorter: the tuned sides follow the batch).
fn name(side: Side) -> &'static str {
    match side {
        Side::ResqDefault => "resq, default",
        Side::ResqTuned => "resq, concurrency = the batch",
        Side::AioDefault => "Powertools async + aiobotocore, pool 10",
        Side::AioTuned => "Powertools async + aiobotocore, pool = batch",
        Side::Boto3 => "Powertools + boto3",
    }
}

/// Wall time against batch size, one line per side, for the runs at one CPU quota (`quota`
/// names it in the title).
pub fn io_chart(real: &RealIo, quota: &str) -> Chart {
    let series = Side::ALL
        .iter()
        .map(|&side| {
            let points: Points = real
                .rows
                .iter()
                .filter_map(|r| r.side(side).map(|s| (r.records as f64, s.wall * 1000.0)))
                .collect();
            (name(side).to_owned(), points)
        })
        .filter(|(_, p)| !p.is_empty())
        .collect();
    Chart {
        title: format!(
            "I/O-bound batch, real clients, {:.0} ms per PUT: {quota}",
            real.latency * 1000.0
        ),
        x_label: "records in the batch".into(),
        y_label: "wall time, ms (median of the warm rounds)".into(),
        x_log: true,
        y_log: true,
        series,
    }
}

/// Messages/s against SQS's latency per call, one line per design: the stand-in's injected
/// latency and LocalStack's measured mean wait per call.
pub fn redrive_chart(scale: &Scale) -> Chart {
    let series = [
        crate::child::Design::Pipelined,
        crate::child::Design::Sequential,
    ]
    .into_iter()
    .map(|design| {
        let mut points: Points = Vec::new();
        if let Some(d) = scale.design(design) {
            points.push((scale.latency.as_secs_f64() * 1000.0, d.msgs_per_s()));
        }
        for ls in scale.localstack.iter().filter(|l| l.design == design) {
            points.push((ls.cycle_ms() / 3.0, ls.msgs_per_s()));
        }
        (design.name().to_owned(), points)
    })
    .collect();
    Chart {
        title: format!(
            "The redriver at {}/s: rate against SQS latency",
            chart::label(crate::scale::SCALE_RATE)
        ),
        x_label: "SQS latency per call, ms (stand-in: injected; LocalStack: mean wait)".into(),
        y_label: "messages/s".into(),
        x_log: true,
        y_log: false,
        series,
    }
}

/// Writes the I/O comparison's picture into `dir`; returns the Markdown that shows it (a link
/// relative to `dir`).
pub fn write_io(dir: &Path, real: &RealIo) -> Result<String, String> {
    let svg = chart::stack(&[io_chart(real, "uncapped (2 shared cores)")]);
    save(
        dir,
        IO_SVG,
        &svg,
        "I/O-bound batch: wall time against batch size, one line per side",
    )
}

/// Writes the redriver's picture into `dir`; returns the Markdown that shows it.
pub fn write_redrive(dir: &Path, scale: &Scale) -> Result<String, String> {
    let svg = redrive_chart(scale).svg();
    save(
        dir,
        REDRIVE_SVG,
        &svg,
        "The redriver's rate against SQS latency",
    )
}

/// Both pictures into `dir` (where RESULTS.md is), and the Markdown that shows them.
pub fn write(dir: &Path, real: &RealIo, scale: &Scale) -> Result<String, String> {
    Ok(write_io(dir, real)? + &write_redrive(dir, scale)?)
}

fn save(dir: &Path, name: &str, svg: &str, alt: &str) -> Result<String, String> {
    let path = dir.join(name);
    std::fs::write(&path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(format!("![{alt}]({name})\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::realio::{RealRow, SideRun};

    fn run(side: Side, wall: f64) -> SideRun {
        SideRun {
            side,
            wall,
            peak_fds: 0,
            peak_connections: 0,
            peak_puts_per_s: 0.0,
            peak_rss_kb: 0,
            failures: 0,
            retries: None,
        }
    }

    #[test]
    fn the_io_chart_has_a_line_per_side_measured_in_ms_by_records() {
        let row = |records, sides| RealRow {
            records,
            payload_bytes: 0,
            tuned: records,
            sides,
        };
        let real = RealIo {
            latency: 0.02,
            rows: vec![
                row(
                    10,
                    vec![run(Side::ResqDefault, 0.0235), run(Side::Boto3, 0.2278)],
                ),
                row(1000, vec![run(Side::ResqDefault, 0.3733)]),
            ],
            throttle: None,
            rounds: 3,
        };
        let c = io_chart(&real, "256 MB");
        // two sides measured: two lines, the sides never measured left out
        assert_eq!(c.series.len(), 2);
        assert_eq!(c.series[0].0, "resq, default");
        assert_eq!(c.series[0].1, vec![(10.0, 23.5), (1000.0, 373.3)]);
        assert_eq!(c.series[1].1, vec![(10.0, 227.8)]);
        assert!(c.title.contains("256 MB") && c.title.contains("20 ms"));
        assert!(roxmltree::Document::parse(&c.svg()).is_ok());
    }

    #[test]
    fn both_pictures_are_written_beside_the_results_and_linked_relative_to_them() {
        let dir = std::env::temp_dir().join(format!("resq-pictures-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let real = RealIo {
            latency: 0.02,
            rows: Vec::new(),
            throttle: None,
            rounds: 1,
        };
        let scale = Scale {
            latency: std::time::Duration::from_millis(10),
            designs: Vec::new(),
            localstack: Vec::new(),
        };
        let md = write(&dir, &real, &scale).unwrap();
        assert_eq!(
            md,
            format!(
                "![I/O-bound batch: wall time against batch size, one line per side]({IO_SVG})\n\n![The redriver's rate against SQS latency]({REDRIVE_SVG})\n\n"
            )
        );
        for name in [IO_SVG, REDRIVE_SVG] {
            let svg = std::fs::read_to_string(dir.join(name)).unwrap();
            roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
