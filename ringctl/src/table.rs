//! Tables and units for the human-readable output (`--json` output never goes through here).

use comfy_table::{presets, CellAlignment, ColumnConstraint, ContentArrangement, Table};

/// A borderless table with `header`; the columns named in `right` (by index) are right-aligned
/// (the numbers). Rows are added with [`Table::add_row`]; [`render`] renders it.
pub fn new(header: &[&str], right: &[usize]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().copied());
    for (i, col) in t.column_iter_mut().enumerate() {
        col.set_padding((0, 1));
        if right.contains(&i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
        // Never wrap a cell: the rows are read (and grepped) line by line.
        col.set_constraint(ColumnConstraint::ContentWidth);
    }
    t
}

/// The table's lines without the padding after the last column, each ending in a newline.
pub fn render(t: &Table) -> String {
    t.lines().map(|l| l.trim_end().to_owned() + "\n").collect()
}

/// A byte count for people: `4.00 KiB` (indicatif's binary units).
pub fn bytes(n: impl TryInto<u64>) -> String {
    indicatif::HumanBytes(n.try_into().unwrap_or(u64::MAX)).to_string()
}

/// A span for people: `3 seconds`, `2 minutes` (indicatif's units).
pub fn duration(d: core::time::Duration) -> String {
    indicatif::HumanDuration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_align_right_and_cells_never_wrap() {
        let mut t = new(&["name", "bytes"], &[1]);
        t.add_row(["a-rather-long-ring-name-that-would-wrap", "7"]);
        t.add_row(["b", "12345"]);
        let text = render(&t);
        assert!(text.lines().all(|l| !l.ends_with(' ')), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[1].trim_end().ends_with(" 7"), "{text}");
        assert_eq!(
            lines[1].trim_end().len(),
            lines[2].trim_end().len(),
            "right-aligned columns end together: {text}"
        );
        assert_eq!(bytes(4096_u64), "4.00 KiB");
        assert_eq!(duration(core::time::Duration::from_secs(3)), "3 seconds");
    }
}
