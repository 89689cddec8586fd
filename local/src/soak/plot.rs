//! The outage as a picture (`target/soak/outage.svg`, and the book's `docs/outage.svg`): the
//! soak's samples, one a second, in three panels over the same time axis: the depths of the main
//! queue and the DLQ, the replay rate, and the downstream-failing alarm's state with the
//! consumer's pause. The fix and the drain are marked.

use std::path::Path;

use plotters::prelude::*;

use super::outage::Sample;
use crate::CliError;

const MAIN: RGBColor = RGBColor(31, 119, 180);
const DLQ: RGBColor = RGBColor(214, 39, 40);
const RATE: RGBColor = RGBColor(44, 160, 44);
const ALARM: RGBColor = RGBColor(214, 39, 40);
const PAUSED: RGBColor = RGBColor(255, 127, 14);
const MARK: RGBColor = RGBColor(120, 120, 120);

/// Moments marked on every panel, seconds since the outage began.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Marks {
    /// The fix.
    pub fixed: f64,
    /// The main queue and the DLQ held no replayable order, when they did.
    pub drained: Option<f64>,
}

/// Draws `samples` into an SVG at `path`.
pub fn draw(samples: &[Sample], marks: Marks, path: &Path) -> Result<(), CliError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::Usage(format!("cannot create {}: {e}", dir.display())))?;
    }
    render(samples, marks, path)
        .map_err(|e| CliError::Usage(format!("drawing {}: {e}", path.display())))
}

fn render(samples: &[Sample], marks: Marks, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (960, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "An outage with resq: the downstream fails every write, then the fix",
        ("sans-serif", 20),
    )?;
    let (top, rest) = root.split_vertically(330);
    let (middle, bottom) = rest.split_vertically(190);
    let x0 = samples.first().map_or(0.0, |s| s.at.min(0.0));
    let x1 = samples.last().map_or(1.0, |s| s.at).max(x0 + 1.0);

    // depths
    let depth_max = samples
        .iter()
        .map(|s| s.main_queue.max(s.dlq))
        .max()
        .unwrap_or(0)
        .max(10) as f64
        * 1.1;
    let mut depths = ChartBuilder::on(&top)
        .margin(10)
        .x_label_area_size(25)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, 0.0..depth_max)?;
    depths
        .configure_mesh()
        .y_desc("messages")
        .x_desc("seconds since the downstream went down")
        .draw()?;
    depths
        .draw_series(LineSeries::new(
            samples.iter().map(|s| (s.at, s.main_queue as f64)),
            MAIN.stroke_width(2),
        ))?
        .label("main queue (orders waiting)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], MAIN.stroke_width(2)));
    depths
        .draw_series(LineSeries::new(
            samples.iter().map(|s| (s.at, s.dlq as f64)),
            DLQ.stroke_width(2),
        ))?
        .label("DLQ (waiting for replay)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], DLQ.stroke_width(2)));
    mark(&mut depths, marks, depth_max)?;
    depths
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;

    // replay rate
    let rate_max = samples
        .iter()
        .map(|s| s.replay_rate)
        .fold(0.0_f64, f64::max)
        .max(1.0)
        * 1.15;
    let mut rate = ChartBuilder::on(&middle)
        .margin(10)
        .x_label_area_size(20)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, 0.0..rate_max)?;
    rate.configure_mesh().y_desc("replays / s").draw()?;
    rate.draw_series(LineSeries::new(
        samples.iter().map(|s| (s.at, s.replay_rate)),
        RATE.stroke_width(2),
    ))?
    .label("replay rate (the redriver's drain, climbing while its alarms stay OK)")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RATE.stroke_width(2)));
    mark(&mut rate, marks, rate_max)?;
    rate.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;

    // states: the alarm on the upper band, the pause on the lower
    let mut states = ChartBuilder::on(&bottom)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, 0.0..2.0)?;
    states
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc("seconds since the downstream went down")
        .draw()?;
    let spans = |on: &dyn Fn(&Sample) -> bool| -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        let mut start: Option<f64> = None;
        for w in samples.windows(2) {
            match (on(&w[0]), start) {
                (true, None) => start = Some(w[0].at),
                (false, Some(s)) => {
                    out.push((s, w[0].at));
                    start = None;
                }
                _ => {}
            }
        }
        if let (Some(s), Some(last)) = (start, samples.last()) {
            out.push((s, last.at));
        }
        out
    };
    let alarm = spans(&|s| s.alarm.as_deref() == Some("ALARM"));
    let paused = spans(&|s| s.consumer_paused == Some(true));
    states
        .draw_series(
            alarm
                .iter()
                .map(|(a, b)| Rectangle::new([(*a, 1.15), (*b, 1.85)], ALARM.mix(0.7).filled())),
        )?
        .label("downstream-failing alarm in ALARM")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], ALARM.mix(0.7).filled()));
    states
        .draw_series(
            paused
                .iter()
                .map(|(a, b)| Rectangle::new([(*a, 0.15), (*b, 0.85)], PAUSED.mix(0.7).filled())),
        )?
        .label("consumer's event source mapping disabled (paused; probes are the gaps)")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], PAUSED.mix(0.7).filled()));
    mark(&mut states, marks, 2.0)?;
    states
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// The outage's start, the fix and the drain as vertical lines.
fn mark<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    marks: Marks,
    top: f64,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let lines = [
        Some((0.0, "down")),
        Some((marks.fixed, "fix")),
        marks.drained.map(|d| (d, "drained")),
    ];
    for (x, label) in lines.into_iter().flatten() {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, 0.0), (x, top)],
            MARK.stroke_width(1),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            label.to_owned(),
            (x, top * 0.97),
            ("sans-serif", 12).into_font().color(&MARK),
        )))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_drawn_with_its_three_panels_and_marks() {
        // GIVEN a minute of samples: the alarm from 10 s, the consumer paused from 12 s to 50 s
        let samples: Vec<Sample> = (0..60)
            .map(|i| Sample {
                at: f64::from(i),
                main_queue: if i < 50 { u64::from(i as u32) * 10 } else { 0 },
                dlq: 5,
                alarm: Some(if (10..45).contains(&i) { "ALARM" } else { "OK" }.into()),
                consumer_paused: Some((12..50).contains(&i)),
                replay_rate: if i > 50 { 20.0 } else { 0.0 },
            })
            .collect();
        let path = std::env::temp_dir().join(format!("resq-outage-{}.svg", std::process::id()));
        // WHEN it is drawn
        draw(
            &samples,
            Marks {
                fixed: 40.0,
                drained: Some(55.0),
            },
            &path,
        )
        .unwrap();
        // THEN an SVG names each series and mark
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        for text in [
            "main queue",
            "DLQ",
            "replays / s",
            "ALARM",
            "disabled",
            "fix",
            "drained",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert!(svg.matches("<rect").count() >= 3);
    }
}
