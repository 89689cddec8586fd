//! Line charts as SVG text, for RESULTS.md (issue 37, item 8): a title, axis labels, a linear
//! or base-10 log scale on either axis, one polyline (with a dot per point) and one legend
//! entry per series, ticks with readable labels. Pure: values in, a string out.

use std::fmt::Write as _;

/// Points of one line: (x, y).
pub type Points = Vec<(f64, f64)>;

/// One chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Above the plot.
    pub title: String,
    /// Under the x axis.
    pub x_label: String,
    /// Beside the y axis.
    pub y_label: String,
    /// A base-10 log scale on x (batch sizes 10, 100, 1,000).
    pub x_log: bool,
    /// A base-10 log scale on y.
    pub y_log: bool,
    /// (series name, its points), one line each, in legend order.
    pub series: Vec<(String, Points)>,
}

/// The drawing's size and the plot area inside it, px.
pub const WIDTH: f64 = 900.0;
/// Height of the drawing.
pub const HEIGHT: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 330.0; // the legend's column
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

/// The plot area: (x0, y0, x1, y1), y growing downwards as in SVG.
pub const PLOT: (f64, f64, f64, f64) = (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM);

/// Colour-blind-safe line colours (Okabe–Ito), taken in turn.
const COLOURS: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

/// One axis: its range (in the scale's units: log10 of the value on a log axis) and ticks.
#[derive(Debug, Clone, PartialEq)]
struct Axis {
    log: bool,
    lo: f64,
    hi: f64,
    /// Tick values (data units).
    ticks: Vec<f64>,
}

impl Axis {
    /// An axis over `values` (finite, and positive on a log axis; others are left out). A
    /// linear axis starts at 0 when every value is positive (a time or a rate read from 0);
    /// no values give 0–1 (1–10 on a log axis).
    fn over(values: impl Iterator<Item = f64>, log: bool) -> Self {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.filter(|v| usable(*v, log)) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if log {
            let (lo, hi) = if lo.is_finite() {
                (lo.log10().floor(), hi.log10().ceil())
            } else {
                (0.0, 1.0)
            };
            let hi = if hi <= lo { lo + 1.0 } else { hi };
            let ticks = (lo as i32..=hi as i32).map(|e| 10f64.powi(e)).collect();
            return Self { log, lo, hi, ticks };
        }
        let (lo, hi) = if lo.is_finite() {
            (lo.min(0.0), hi.max(0.0))
        } else {
            (0.0, 1.0)
        };
        let step = nice_step((hi - lo).max(f64::MIN_POSITIVE) / 5.0);
        let (lo, hi) = ((lo / step).floor() * step, (hi / step).ceil() * step);
        let hi = if hi <= lo { lo + step } else { hi };
        let n = ((hi - lo) / step).round() as usize;
        let ticks = (0..=n).map(|i| lo + i as f64 * step).collect();
        Self { log, lo, hi, ticks }
    }

    /// Where `v` falls, 0 (at `lo`) to 1 (at `hi`).
    fn fraction(&self, v: f64) -> f64 {
        let v = if self.log { v.log10() } else { v };
        (v - self.lo) / (self.hi - self.lo)
    }
}

fn usable(v: f64, log: bool) -> bool {
    v.is_finite() && (!log || v > 0.0)
}

/// 1, 2 or 5 × a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * p)
}

/// A tick's label: thousands grouped (`1,000`), at most three decimals, trailing zeros off.
pub fn label(v: f64) -> String {
    if v.abs() >= 1000.0 || v == v.trunc() {
        let digits = format!("{:.0}", v.abs());
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        return if v < 0.0 { format!("-{out}") } else { out };
    }
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// `s` as XML text (also inside an attribute).
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

impl Chart {
    /// The x and y axes over every series' points.
    fn axes(&self) -> (Axis, Axis) {
        let points = || self.series.iter().flat_map(|(_, p)| p.iter());
        (
            Axis::over(points().map(|p| p.0), self.x_log),
            Axis::over(points().map(|p| p.1), self.y_log),
        )
    }

    /// Each series' points as drawn (px), sorted by x; points a scale cannot show (not
    /// finite, or not positive on a log axis) are left out.
    pub fn plotted(&self) -> Vec<Vec<(f64, f64)>> {
        let (x, y) = self.axes();
        let (x0, y0, x1, y1) = PLOT;
        self.series
            .iter()
            .map(|(_, points)| {
                let mut p: Vec<(f64, f64)> = points
                    .iter()
                    .filter(|(a, b)| usable(*a, x.log) && usable(*b, y.log))
                    .copied()
                    .collect();
                p.sort_by(|a, b| a.0.total_cmp(&b.0));
                p.into_iter()
                    .map(|(a, b)| {
                        (
                            x0 + x.fraction(a) * (x1 - x0),
                            y1 - y.fraction(b) * (y1 - y0),
                        )
                    })
                    .collect()
            })
            .collect()
    }

    /// The chart as a standalone SVG document.
    pub fn svg(&self) -> String {
        stack(std::slice::from_ref(self))
    }

    /// The chart's elements, drawn at the origin.
    fn elements(&self) -> String {
        let (x, y) = self.axes();
        let (x0, y0, x1, y1) = PLOT;
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/><text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
            WIDTH / 2.0,
            escape(&self.title)
        );
        for &t in &x.ticks {
            let px = x0 + x.fraction(t) * (x1 - x0);
            let _ = write!(
                s,
                r##"<line x1="{px:.1}" y1="{y0}" x2="{px:.1}" y2="{y1}" stroke="#ddd"/><text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
                y1 + 16.0,
                label(t)
            );
        }
        for &t in &y.ticks {
            let py = y1 - y.fraction(t) * (y1 - y0);
            let _ = write!(
                s,
                r##"<line x1="{x0}" y1="{py:.1}" x2="{x1}" y2="{py:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                x0 - 6.0,
                py + 4.0,
                label(t)
            );
        }
        let _ = write!(
            s,
            r#"<rect x="{x0}" y="{y0}" width="{}" height="{}" fill="none" stroke="black"/>"#,
            x1 - x0,
            y1 - y0
        );
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            (x0 + x1) / 2.0,
            HEIGHT - 18.0,
            escape(&self.x_label)
        );
        let (cx, cy) = (18.0, (y0 + y1) / 2.0);
        let _ = write!(
            s,
            r#"<text x="{cx}" y="{cy}" text-anchor="middle" transform="rotate(-90 {cx} {cy})">{}</text>"#,
            escape(&self.y_label)
        );
        if self.series.iter().all(|(_, p)| p.is_empty()) {
            let _ = write!(
                s,
                r##"<text x="{}" y="{}" text-anchor="middle" fill="#888">no data</text>"##,
                (x0 + x1) / 2.0,
                (y0 + y1) / 2.0
            );
        }
        for (i, ((name, _), points)) in self.series.iter().zip(self.plotted()).enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let path: Vec<String> = points
                .iter()
                .map(|(a, b)| format!("{a:.1},{b:.1}"))
                .collect();
            if points.len() > 1 {
                let _ = write!(
                    s,
                    r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
                    path.join(" ")
                );
            }
            for (a, b) in &points {
                let _ = write!(
                    s,
                    r#"<circle cx="{a:.1}" cy="{b:.1}" r="3" fill="{colour}"/>"#
                );
            }
            let ly = y0 + 8.0 + i as f64 * 18.0;
            let _ = write!(
                s,
                r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
                x1 + 12.0,
                x1 + 32.0,
                x1 + 38.0,
                ly + 4.0,
                escape(name)
            );
        }
        s
    }
}

/// `charts` one under another in one SVG document.
pub fn stack(charts: &[Chart]) -> String {
    let height = HEIGHT * charts.len().max(1) as f64;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    for (i, c) in charts.iter().enumerate() {
        let _ = write!(
            s,
            r#"<g transform="translate(0 {})">{}</g>"#,
            i as f64 * HEIGHT,
            c.elements()
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(series: Vec<(String, Points)>, x_log: bool, y_log: bool) -> Chart {
        Chart {
            title: "wall time <ms> & batch".into(),
            x_label: "records".into(),
            y_label: "ms".into(),
            x_log,
            y_log,
            series,
        }
    }

    fn two_sides() -> Vec<(String, Points)> {
        vec![
            (
                "resq".into(),
                vec![(1000.0, 373.3), (10.0, 23.5), (100.0, 53.8)],
            ),
            (
                "Powertools \"async\"".into(),
                vec![(10.0, 31.6), (100.0, 305.0), (1000.0, 3064.0)],
            ),
        ]
    }

    fn inside((x, y): (f64, f64)) -> bool {
        let (x0, y0, x1, y1) = PLOT;
        (x0 - 1e-9..=x1 + 1e-9).contains(&x) && (y0 - 1e-9..=y1 + 1e-9).contains(&y)
    }

    #[test]
    fn the_svg_is_well_formed_xml_with_a_line_and_a_legend_entry_per_series() {
        for (x_log, y_log) in [(true, false), (true, true), (false, false)] {
            // GIVEN two series, names and title with characters XML reserves
            let svg = chart(two_sides(), x_log, y_log).svg();
            // THEN it parses, and draws one polyline and one legend text per series
            let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{e}: {svg}"));
            let count = |tag: &str| doc.descendants().filter(|n| n.has_tag_name(tag)).count();
            assert_eq!(count("polyline"), 2, "{svg}");
            assert_eq!(count("circle"), 6);
            let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
            assert!(texts.contains(&"Powertools \"async\""), "{texts:?}");
            assert!(texts.contains(&"wall time <ms> & batch"));
            assert!(texts.contains(&"records") && texts.contains(&"ms"));
        }
    }

    #[test]
    fn points_map_inside_the_plot_area_in_order_of_x() {
        for (x_log, y_log) in [(true, false), (true, true), (false, false), (false, true)] {
            let plotted = chart(two_sides(), x_log, y_log).plotted();
            for line in &plotted {
                assert!(line.iter().all(|p| inside(*p)), "{line:?}");
                assert!(line.windows(2).all(|w| w[0].0 < w[1].0), "{line:?}");
            }
            // a longer time is drawn higher (smaller y in SVG)
            assert!(plotted[1][2].1 < plotted[0][2].1);
        }
        // on a log x axis over 10–1,000 the decades are evenly spaced, 10 and 1,000 at the edges
        let line = &chart(two_sides(), true, false).plotted()[0];
        let (x0, _, x1, _) = PLOT;
        assert!((line[0].0 - x0).abs() < 1e-9 && (line[2].0 - x1).abs() < 1e-9);
        assert!((line[1].0 - (x0 + x1) / 2.0).abs() < 1e-9);
    }

    #[test]
    fn ticks_are_readable_and_cover_the_data() {
        let (x, y) = chart(two_sides(), true, false).axes();
        assert_eq!(x.ticks, vec![10.0, 100.0, 1000.0]);
        assert_eq!(y.ticks.first(), Some(&0.0));
        assert!(*y.ticks.last().unwrap() >= 3064.0);
        let labels: Vec<String> = x.ticks.iter().map(|t| label(*t)).collect();
        assert_eq!(labels, ["10", "100", "1,000"]);
        assert_eq!(label(0.25), "0.25");
        assert_eq!(label(2500.0), "2,500");
        assert_eq!(label(-1500.0), "-1,500");
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(700.0), 1000.0);
        assert_eq!(nice_step(20.0), 20.0);
    }

    #[test]
    fn an_empty_series_and_unplottable_points_are_handled() {
        // GIVEN an empty series beside one with a zero and a NaN on a log axis
        let series = vec![
            ("nothing".to_owned(), vec![]),
            (
                "some".to_owned(),
                vec![(0.0, 1.0), (10.0, f64::NAN), (100.0, 5.0)],
            ),
        ];
        let c = chart(series, true, false);
        let svg = c.svg();
        roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{e}: {svg}"));
        // THEN the empty series has a legend entry and no line; the others keep what they can
        let plotted = c.plotted();
        assert!(plotted[0].is_empty());
        assert_eq!(plotted[1].len(), 1);
        assert!(svg.contains(">nothing<") && !svg.contains("no data"));
        // and a chart with no points at all says so
        let none = chart(vec![("a".into(), vec![])], true, true).svg();
        roxmltree::Document::parse(&none).unwrap();
        assert!(none.contains("no data"));
    }

    #[test]
    fn charts_stack_one_under_another_in_one_document() {
        let charts = [
            chart(two_sides(), true, false),
            chart(two_sides(), true, true),
        ];
        let svg = stack(&charts);
        let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{e}: {svg}"));
        let root = doc.root_element();
        assert_eq!(
            root.attribute("height"),
            Some(&*format!("{}", 2.0 * HEIGHT))
        );
        let groups: Vec<_> = root.children().filter(|n| n.has_tag_name("g")).collect();
        assert_eq!(groups.len(), 2);
        assert_eq!(
            groups[1].attribute("transform"),
            Some(&*format!("translate(0 {HEIGHT})"))
        );
        assert_eq!(
            doc.descendants()
                .filter(|n| n.has_tag_name("polyline"))
                .count(),
            4
        );
    }
}
