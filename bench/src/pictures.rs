//! The pictures `make bench` draws beside RESULTS.md (issue 37, item 8), from the report's
//! figures: `io.svg`, wall time against batch size, one line per side, one chart per CPU quota;
//! `redrive.svg`, the redriver's rate against SQS's latency per call, one line per design.

use std::path::Path;

use crate::chart::{self, Chart, Points};
use crate::realio;

/// The I/O comparison's file, beside RESULTS.md.
pub const IO_SVG: &str = "io.svg";
/// The redriver's file, beside RESULTS.md.
pub const REDRIVE_SVG: &str = "redrive.svg";

/// Wall time against batch size, one line per side, for the runs at one CPU quota: what
/// [`crate::realio::RealIo::wall_charts`] gives for it.
pub fn io_chart((title, series): &realio::Chart) -> Chart {
    Chart {
        title: title.clone(),
        x_label: "records in the batch".into(),
        y_label: "wall time, ms (p50 of the warm invocations)".into(),
        x_log: true,
        y_log: true,
        series: series.clone(),
    }
}

/// Messages/s against SQS's median latency per call, one line per design, on an SQS that slows
/// under load ([`crate::run::Report::redrive_rate_vs_latency`]).
pub fn redrive_chart(series: &[(String, Points)]) -> Chart {
    Chart {
        title: format!(
            "The redriver at {}/s against an SQS that slows under load: rate against SQS latency",
            chart::label(crate::scale::SCALE_RATE)
        ),
        x_label: "SQS latency per call alone, ms (median; more with the calls in flight)".into(),
        y_label: "messages/s".into(),
        x_log: true,
        y_log: true,
        series: series.to_vec(),
    }
}

/// Writes the I/O comparison's picture (a chart per CPU quota) into `dir`; returns the
/// Markdown that shows it (a link relative to `dir`).
pub fn write_io(dir: &Path, charts: &[realio::Chart]) -> Result<String, String> {
    let charts: Vec<Chart> = charts.iter().map(io_chart).collect();
    save(
        dir,
        IO_SVG,
        &chart::stack(&charts),
        "I/O-bound batch: wall time against batch size, one line per side, a chart per CPU quota",
    )
}

/// Writes the redriver's picture into `dir`; returns the Markdown that shows it.
pub fn write_redrive(dir: &Path, series: &[(String, Points)]) -> Result<String, String> {
    let svg = redrive_chart(series).svg();
    save(
        dir,
        REDRIVE_SVG,
        &svg,
        "The redriver's rate against SQS latency",
    )
}

/// Both pictures into `dir` (where RESULTS.md is), and the Markdown that shows them.
pub fn write(
    dir: &Path,
    io: &[realio::Chart],
    redrive: &[(String, Points)],
) -> Result<String, String> {
    Ok(write_io(dir, io)? + &write_redrive(dir, redrive)?)
}

/// The book's sources, beside `dir` (bench/): docs/benchmarks.md includes RESULTS.md, whose
/// links then resolve from docs/, so each picture is written to both.
const BOOK: &str = "../docs";

fn save(dir: &Path, name: &str, svg: &str, alt: &str) -> Result<String, String> {
    let book = dir.join(BOOK);
    for dir in [dir]
        .into_iter()
        .chain(book.is_dir().then_some(book.as_path()))
    {
        let path = dir.join(name);
        std::fs::write(&path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(format!("![{alt}]({name})\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_io_chart_draws_the_quotas_series_by_records_in_ms() {
        let quota: realio::Chart = (
            "256 MB".into(),
            vec![
                ("resq".into(), vec![(10.0, 91.1), (1000.0, 1048.4)]),
                ("boto3".into(), vec![(10.0, 344.7)]),
            ],
        );
        let c = io_chart(&quota);
        assert_eq!(c.series, quota.1);
        assert!(c.x_log && c.y_log && c.title == "256 MB");
        assert!(roxmltree::Document::parse(&c.svg()).is_ok());
    }

    #[test]
    fn both_pictures_are_written_beside_the_results_and_the_book_and_linked_relative_to_them() {
        // GIVEN the results' directory and the book's beside it
        let root = std::env::temp_dir().join(format!("resq-pictures-{}", std::process::id()));
        let (dir, book) = (root.join("bench"), root.join("docs"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&book).unwrap();
        let redrive = vec![("backs off".to_owned(), vec![(5.0, 1713.0), (50.0, 160.0)])];
        let md = write(&dir, &[], &redrive).unwrap();
        assert_eq!(
            md,
            format!(
                "![I/O-bound batch: wall time against batch size, one line per side, a chart per CPU quota]({IO_SVG})\n\n![The redriver's rate against SQS latency]({REDRIVE_SVG})\n\n"
            )
        );
        // THEN each is in both, the same (the book includes RESULTS.md: its links resolve there)
        for name in [IO_SVG, REDRIVE_SVG] {
            let svg = std::fs::read_to_string(dir.join(name)).unwrap();
            roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(std::fs::read_to_string(book.join(name)).unwrap(), svg);
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}
