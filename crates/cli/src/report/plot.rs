//! Figures as PNG and SVG, drawn once through plotters' backend trait.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

const SIZE: (u32, u32) = (760, 460);
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Registers the font the figures use (once per process).
pub fn init_font() -> Result<()> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let bytes = std::fs::read(FONT)
            .map_err(|e| format!("{FONT}: {e}; install it (Debian: apt-get install fonts-dejavu-core)"))?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{FONT} is not a usable TrueType font"))
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// A line chart: named series of (x, y) points.
pub struct Lines {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// A bar chart of named values.
pub struct Bars {
    pub title: String,
    pub y_label: String,
    pub log_y: bool,
    pub bars: Vec<(String, f64)>,
}

fn range(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        // Whole decades: plotters labels a log axis only at powers of ten, so a
        // narrower range (one bar, or ratios between 2 and 8) would have no labels.
        (10f64.powf(lo.log10().floor()), 10f64.powf((hi * 1.0001).log10().ceil()))
    } else if hi > lo {
        let pad = (hi - lo) * 0.05;
        (lo - pad, hi + pad)
    } else {
        (lo - 1.0, hi + 1.0)
    }
}

/// Whether a requested log axis is worth it: plotters labels log axes only at
/// powers of ten, so values within one decade (perplexities 230–410, say) read
/// better on a linear axis.
fn use_log(values: impl Iterator<Item = f64>, requested: bool) -> bool {
    if !requested {
        return false;
    }
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    lo.is_finite() && hi / lo >= 10.0
}

/// Axis labels with at most 3 significant digits, no trailing zeros.
fn tick(v: &f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        return "0".into();
    }
    if !(1e-3..1e6).contains(&a) {
        return format!("{v:.0e}");
    }
    let digits = (2 - a.log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing failed: {e:?}")
}

fn draw_lines<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &Lines) -> Result<()> {
    root.fill(&WHITE).map_err(err)?;
    let log_x = use_log(c.series.iter().flat_map(|s| s.1.iter().map(|p| p.0)), c.log_x);
    let log_y = use_log(c.series.iter().flat_map(|s| s.1.iter().map(|p| p.1)), c.log_y);
    let xs = range(c.series.iter().flat_map(|s| s.1.iter().map(|p| p.0)), log_x);
    let ys = range(c.series.iter().flat_map(|s| s.1.iter().map(|p| p.1)), log_y);
    let mut b = ChartBuilder::on(&root);
    b.caption(&c.title, ("sans-serif", 20)).margin(12).x_label_area_size(40).y_label_area_size(70);
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(c.x_label.as_str())
                .y_desc(c.y_label.as_str())
                .x_labels(8)
                .y_labels(8)
                .x_label_formatter(&tick)
                .y_label_formatter(&tick)
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(err)?;
            for (i, (name, pts)) in c.series.iter().enumerate() {
                let color = Palette99::pick(i).stroke_width(2);
                let pts: Vec<(f64, f64)> = pts
                    .iter()
                    .copied()
                    .filter(|p| {
                        p.0.is_finite() && p.1.is_finite() && (!log_x || p.0 > 0.0) && (!log_y || p.1 > 0.0)
                    })
                    .collect();
                chart
                    .draw_series(LineSeries::new(pts.clone(), color))
                    .map_err(err)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], Palette99::pick(i).stroke_width(2))
                    });
                if pts.len() <= 30 {
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, Palette99::pick(i).filled())))
                        .map_err(err)?;
                }
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 12))
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(err)?;
        }};
    }
    match (log_x, log_y) {
        (false, false) => body!(b.build_cartesian_2d(xs.0..xs.1, ys.0..ys.1).map_err(err)?),
        (true, false) => body!(b.build_cartesian_2d((xs.0..xs.1).log_scale(), ys.0..ys.1).map_err(err)?),
        (false, true) => body!(b.build_cartesian_2d(xs.0..xs.1, (ys.0..ys.1).log_scale()).map_err(err)?),
        (true, true) => {
            body!(b.build_cartesian_2d((xs.0..xs.1).log_scale(), (ys.0..ys.1).log_scale()).map_err(err)?)
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

fn draw_bars<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &Bars) -> Result<()> {
    root.fill(&WHITE).map_err(err)?;
    let n = c.bars.len().max(1);
    let log_y = use_log(c.bars.iter().map(|b| b.1), c.log_y);
    let ys =
        range(c.bars.iter().map(|b| b.1).chain(std::iter::once(if log_y { f64::NAN } else { 0.0 })), log_y);
    let names: Vec<String> = c.bars.iter().map(|b| b.0.clone()).collect();
    let mut b = ChartBuilder::on(&root);
    b.caption(&c.title, ("sans-serif", 20)).margin(12).x_label_area_size(90).y_label_area_size(70);
    macro_rules! body {
        ($chart:expr, $base:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n)
                .x_label_formatter(&|x: &f64| {
                    let i = x.round() as usize;
                    if (x - x.round()).abs() < 1e-6 && i < names.len() {
                        names[i].clone()
                    } else {
                        String::new()
                    }
                })
                .x_label_style(("sans-serif", 11).into_font().transform(FontTransform::Rotate90))
                .y_desc(c.y_label.as_str())
                .y_label_formatter(&tick)
                .label_style(("sans-serif", 12))
                .draw()
                .map_err(err)?;
            chart
                .draw_series(c.bars.iter().enumerate().map(|(i, (_, v))| {
                    Rectangle::new(
                        [(i as f64 - 0.35, $base), (i as f64 + 0.35, *v)],
                        Palette99::pick(i).filled(),
                    )
                }))
                .map_err(err)?;
        }};
    }
    let xr = -0.6..(n as f64 - 0.4);
    if log_y {
        body!(b.build_cartesian_2d(xr, (ys.0..ys.1).log_scale()).map_err(err)?, ys.0)
    } else {
        body!(b.build_cartesian_2d(xr, ys.0..ys.1).map_err(err)?, 0.0)
    }
    root.present().map_err(err)?;
    Ok(())
}

/// A figure to write as `<stem>.png` and `<stem>.svg`.
pub enum Figure {
    Lines(Lines),
    Bars(Bars),
}

impl Figure {
    /// Writes both formats; returns the PNG's path.
    pub fn write(&self, dir: &Path, stem: &str) -> Result<PathBuf> {
        init_font()?;
        let png = dir.join(format!("{stem}.png"));
        let svg = dir.join(format!("{stem}.svg"));
        match self {
            Figure::Lines(c) => {
                draw_lines(BitMapBackend::new(&png, SIZE).into_drawing_area(), c)?;
                draw_lines(SVGBackend::new(&svg, SIZE).into_drawing_area(), c)?;
            }
            Figure::Bars(c) => {
                draw_bars(BitMapBackend::new(&png, SIZE).into_drawing_area(), c)?;
                draw_bars(SVGBackend::new(&svg, SIZE).into_drawing_area(), c)?;
            }
        }
        std::fs::metadata(&png).with_context(|| format!("writing {}", png.display()))?;
        Ok(png)
    }
}

#[cfg(test)]
mod tests {
    use super::{range, tick, use_log};

    #[test]
    fn ticks_are_short() {
        assert_eq!(tick(&1000.0), "1000");
        assert_eq!(tick(&0.5), "0.5");
        assert_eq!(tick(&98.25), "98.2");
        assert_eq!(tick(&2.0e7), "2e7");
        assert_eq!(tick(&0.0), "0");
        assert_eq!(tick(&0.0123), "0.0123");
    }

    #[test]
    fn log_ranges_span_whole_decades() {
        // One bar of 3.2 must still get a labelled axis: 1..10.
        assert_eq!(range([3.2].into_iter(), true), (1.0, 10.0));
        assert_eq!(range([0.02, 450.0].into_iter(), true), (0.01, 1000.0));
        // Non-positive values cannot be drawn on a log axis and are ignored.
        assert_eq!(range([-1.0, 0.0, 10.0].into_iter(), true), (10.0, 100.0));
    }

    #[test]
    fn log_axes_only_for_values_spanning_a_decade() {
        assert!(use_log([0.05, 0.6].into_iter(), true));
        assert!(!use_log([230.0, 410.0].into_iter(), true));
        assert!(!use_log([0.05, 0.6].into_iter(), false));
        assert!(!use_log([f64::NAN, -1.0].into_iter(), true));
    }
}
