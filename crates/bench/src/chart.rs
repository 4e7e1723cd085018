//! `scaledkv-bench chart`: a grouped bar chart (SVG) from a CSV of
//! `group,series,value` rows, for the compare scripts' tables (YCSB: a
//! group per workload, a bar per target, operations per second).

use std::path::PathBuf;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "scaledkv-bench chart", about = "grouped bar chart from group,series,value rows")]
struct Flags {
    /// Rows `group,series,value` (a header line starting with `group` is skipped).
    #[arg(long)]
    csv: PathBuf,
    /// The SVG to write.
    #[arg(long)]
    svg: PathBuf,
    #[arg(long, default_value = "")]
    title: String,
    /// The value axis' name.
    #[arg(long, default_value = "operations/s (log scale)")]
    unit: String,
}

struct Row {
    group: String,
    series: String,
    value: f64,
}

fn parse(text: &str) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() || (n == 0 && line.starts_with("group")) {
            continue;
        }
        let parts: Vec<&str> = line.split(',').map(str::trim).collect();
        let [group, series, value] = parts[..] else {
            return Err(format!("line {}: expected group,series,value: {line}", n + 1));
        };
        let value: f64 = value.parse().map_err(|_| format!("line {}: `{value}` is not a number", n + 1))?;
        if !(value > 0.0 && value.is_finite()) {
            return Err(format!("line {}: {value} cannot be drawn on a log scale", n + 1));
        }
        rows.push(Row { group: group.to_string(), series: series.to_string(), value });
    }
    if rows.is_empty() {
        return Err("no rows to draw".into());
    }
    Ok(rows)
}

/// Names in the order they first appear.
fn first_seen<'a>(names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = Vec::new();
    for name in names {
        if !seen.contains(&name) {
            seen.push(name);
        }
    }
    seen
}

pub fn main(args: Vec<String>) -> Result<(), String> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let flags = Flags::parse_from(args);
    let text = std::fs::read_to_string(&flags.csv).map_err(|e| format!("{}: {e}", flags.csv.display()))?;
    let rows = parse(&text)?;
    let groups = first_seen(rows.iter().map(|r| r.group.as_str()));
    let series = first_seen(rows.iter().map(|r| r.series.as_str()));
    let (low, high) = rows.iter().fold((f64::MAX, 0f64), |(lo, hi), r| (lo.min(r.value), hi.max(r.value)));
    // Each group takes one slot per series plus a gap.
    let slots = (series.len() + 1) as f64;
    let err = |e: &dyn std::fmt::Display| format!("chart {}: {e}", flags.svg.display());
    let root = SVGBackend::new(&flags.svg, (160 + 70 * (groups.len() * series.len()) as u32, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&flags.title, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(80)
        // The strip below the bars' floor (low / 2) holds the group names.
        .build_cartesian_2d(0f64..groups.len() as f64 * slots, ((low / 5.0)..(high * 2.0)).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .disable_x_axis()
        .y_desc(&flags.unit)
        .y_label_formatter(&|v| if *v >= low / 2.0 { format!("{v:.0}") } else { String::new() })
        .draw()
        .map_err(|e| err(&e))?;
    for (s, name) in series.iter().enumerate() {
        let color = Palette99::pick(s).to_rgba();
        let bars = rows.iter().filter(|r| r.series == *name).map(|r| {
            let g = groups.iter().position(|g| *g == r.group).expect("collected from the rows") as f64;
            let x = g * slots + 0.5 + s as f64;
            Rectangle::new([(x, low / 2.0), (x + 0.9, r.value)], color.filled())
        });
        chart
            .draw_series(bars)
            .map_err(|e| err(&e))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    let labels = groups.iter().enumerate().map(|(g, name)| {
        let center = g as f64 * slots + slots / 2.0;
        let style = TextStyle::from(("sans-serif", 16).into_font()).pos(Pos::new(HPos::Center, VPos::Center));
        Text::new(name.to_string(), (center, low / 3.2), style)
    });
    chart.draw_series(labels).map_err(|e| err(&e))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_read_and_bad_ones_refused() {
        let rows = parse("group,series,value\na,scaledkv,100\na,redis,50.5\nb,scaledkv,7\n").unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(first_seen(rows.iter().map(|r| r.series.as_str())), ["scaledkv", "redis"]);
        assert!(parse("a,b\n").is_err());
        assert!(parse("a,b,x\n").is_err());
        assert!(parse("a,b,0\n").is_err(), "zero has no place on a log scale");
        assert!(parse("group,series,value\n").is_err());
    }

    #[test]
    fn draws_an_svg() {
        let dir = tempfile::tempdir().unwrap();
        let (csv, svg) = (dir.path().join("in.csv"), dir.path().join("out.svg"));
        std::fs::write(&csv, "a,scaledkv,100\na,redis,50\nb,scaledkv,7000\nb,redis,9000\n").unwrap();
        let args = ["chart", "--csv", csv.to_str().unwrap(), "--svg", svg.to_str().unwrap(), "--title", "t"];
        main(args.iter().map(|a| a.to_string()).collect()).unwrap();
        let drawn = std::fs::read_to_string(&svg).unwrap();
        assert!(drawn.starts_with("<svg"));
        // The group names under the bars, the series in the legend.
        for text in ["\na\n", "\nb\n", "\nscaledkv\n", "\nredis\n"] {
            assert!(drawn.contains(text), "{text:?} drawn");
        }
        // The background, four bars, two legend boxes (and the legend's frame).
        assert!(drawn.matches("<rect").count() >= 7);
    }
}
