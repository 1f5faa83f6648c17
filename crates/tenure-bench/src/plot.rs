//! The cost curve as a PNG, drawn by the benchmark from the figures it just measured: six
//! panels — lock cycles/s, their p99 and their ratio to raw SQL against concurrent tasks; then
//! statements per renew interval, CPU and RSS against leases held by one process — one line
//! per backend (raw SQL dashed beside tenure's cycles/s).

use crate::curve::Curve;
use plotters::prelude::*;
use std::path::Path;

/// One colour per backend, in the order of the run.
const COLOURS: [RGBColor; 3] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
];

/// A line: its label, its colour, its `(x, y)` points.
type Line = (String, RGBColor, Vec<(f64, f64)>);

/// One panel: `(x, y)` points per backend (its name, its colour), raw SQL's too where given.
struct Panel<'a> {
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    lines: Vec<Line>,
    dashed: Vec<Line>,
    /// A horizontal goal line, labelled.
    goal: Option<(f64, &'a str)>,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Loads the font once (the `ab_glyph` backend needs it for the life of the process).
fn load_font(font: &Path) -> Result<(), String> {
    static LOADED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    LOADED
        .get_or_init(|| {
            let bytes = std::fs::read(font).map_err(|e| {
                format!(
                    "font {}: {e} (apt-get install fonts-dejavu-core, or --plot-font)",
                    font.display()
                )
            })?;
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("font {}: not a TrueType font", font.display()))
        })
        .clone()
}

/// Draws `curves` into `path` (PNG, 1500 × 900).
pub(crate) fn draw(curves: &[Curve], path: &Path, font: &Path) -> Result<(), String> {
    load_font(font)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            return Err(format!(
                "{} does not exist: pass --plot PATH (or run from the repository's root)",
                dir.display()
            ));
        }
    }
    let colour = |i: usize| COLOURS[i % COLOURS.len()];
    let per_task = |f: &dyn Fn(&crate::curve::CyclePoint) -> Option<f64>| {
        curves
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let points = c
                    .cycles
                    .iter()
                    .filter_map(|p| f(p).map(|y| (p.tasks as f64, y)))
                    .collect();
                (c.backend.clone(), colour(i), points)
            })
            .collect::<Vec<Line>>()
    };
    let per_lease = |f: &dyn Fn(&crate::scale::Held) -> f64| {
        curves
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let points = c
                    .leases
                    .iter()
                    .filter_map(|p| p.held.as_ref().map(|h| (p.leases as f64, f(h))))
                    .collect();
                (c.backend.clone(), colour(i), points)
            })
            .collect::<Vec<Line>>()
    };
    let panels = [
        Panel {
            title: "Lock cycles per second",
            x_desc: "concurrent tasks",
            y_desc: "cycles/s",
            lines: per_task(&|p| Some(p.tenure.per_second)),
            dashed: per_task(&|p| Some(p.raw.per_second))
                .into_iter()
                .map(|(n, c, p)| (format!("{n} raw SQL"), c, p))
                .collect(),
            goal: None,
        },
        Panel {
            title: "Lock cycle p99",
            x_desc: "concurrent tasks",
            y_desc: "ms",
            lines: per_task(&|p| p.tenure.p99_ms),
            dashed: vec![],
            goal: None,
        },
        Panel {
            title: "Lock cycles as × raw SQL",
            x_desc: "concurrent tasks",
            y_desc: "× raw SQL",
            lines: per_task(&|p| {
                (p.raw.per_second > 0.0).then(|| p.tenure.per_second / p.raw.per_second)
            }),
            dashed: vec![],
            goal: Some((0.8, "goal 0.80×")),
        },
        Panel {
            title: "Statements per renew interval",
            x_desc: "leases held by one process",
            y_desc: "statements",
            lines: per_lease(&|h| h.statements_per_interval()),
            dashed: vec![],
            goal: None,
        },
        Panel {
            title: "CPU of the holding process",
            x_desc: "leases held by one process",
            y_desc: "% of a core",
            lines: per_lease(&|h| 100.0 * h.cpu_s / h.window_s),
            dashed: vec![],
            goal: None,
        },
        Panel {
            title: "RSS of the holding process",
            x_desc: "leases held by one process",
            y_desc: "MiB",
            lines: per_lease(&|h| h.rss_kb as f64 / 1024.0),
            dashed: vec![],
            goal: None,
        },
    ];
    let root = BitMapBackend::new(path, (1500, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, rest) = root.split_vertically(40);
    top.titled(
        "tenure cost curve (tenure-bench --only curve)",
        ("sans-serif", 24),
    )
    .map_err(err)?;
    for (area, panel) in rest.split_evenly((2, 3)).iter().zip(panels.iter()) {
        draw_panel(area, panel)?;
    }
    root.present().map_err(err)
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    panel: &Panel<'_>,
) -> Result<(), String> {
    let all = panel.lines.iter().chain(panel.dashed.iter());
    let xs: Vec<f64> = all
        .clone()
        .flat_map(|(_, _, p)| p.iter().map(|(x, _)| *x))
        .collect();
    let ys: Vec<f64> = all
        .flat_map(|(_, _, p)| p.iter().map(|(_, y)| *y))
        .collect();
    let x_min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let x_max = xs.iter().copied().fold(0.0, f64::max);
    let y_max = ys
        .iter()
        .copied()
        .chain(panel.goal.map(|(g, _)| g))
        .fold(0.0, f64::max);
    if !x_min.is_finite() || x_max <= 0.0 {
        // Nothing measured in this panel: its caption says so.
        area.titled(
            &format!("{}: not measured", panel.title),
            ("sans-serif", 16),
        )
        .map_err(err)?;
        return Ok(());
    }
    let x_range = (x_min * 0.8)..(x_max * 1.25);
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range.log_scale(), 0.0..(y_max * 1.15).max(1e-9))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(panel.x_desc)
        .y_desc(panel.y_desc)
        .x_labels(8)
        .x_label_formatter(&|x| match x.round() {
            x if x >= 1000.0 => format!("{}k", x / 1000.0),
            x => format!("{x}"),
        })
        .y_label_formatter(&|y| {
            if y_max >= 10.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        })
        .light_line_style(BLACK.mix(0.04))
        .draw()
        .map_err(err)?;
    for (name, colour, points) in &panel.lines {
        let c = *colour;
        chart
            .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, c.filled())))
            .map_err(err)?;
    }
    for (name, colour, points) in &panel.dashed {
        let c = colour.mix(0.6);
        chart
            .draw_series(DashedLineSeries::new(
                points.clone(),
                6,
                4,
                c.stroke_width(2),
            ))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(1)));
    }
    if let Some((goal, label)) = panel.goal {
        let ends = vec![(x_min * 0.8, goal), (x_max * 1.25, goal)];
        chart
            .draw_series(DashedLineSeries::new(ends, 4, 4, BLACK.stroke_width(1)))
            .map_err(err)?
            .label(label)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)
}
