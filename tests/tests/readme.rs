//! The table of events in docs/events.md is the event table's: every row of it, as generated
//! here, must be on that page (on failure the expected table is printed, to paste).

use tracer_common::{EVENTS, EventDef, Field, ProbeFlags};

/// The names of a record's fields a1..a5, a1 first, without the trailing empty (0) ones.
fn fields(event: &EventDef, record_fields: &[Field; 5]) -> String {
    let mut names: Vec<String> = record_fields
        .iter()
        .map(|&f| event.field_name(f).to_string())
        .collect();
    while names.last().is_some_and(|n| n == "0") {
        names.pop();
    }
    names.join(" · ")
}

fn row(event: &EventDef) -> String {
    let paired = event.flags.has(ProbeFlags::PAIRED);
    let (first, second) = if paired {
        (
            format!("1: {}", fields(event, &event.first)),
            format!("2: {}", fields(event, &event.second)),
        )
    } else {
        (format!("0: {}", fields(event, &event.first)), String::new())
    };
    format!(
        "| {} | {}:{} | {} | `{}` | {} | {} |",
        event.category.name(),
        event.category.code(),
        event.event2,
        event.name,
        event.symbol,
        first,
        second
    )
}

#[test]
fn the_event_docs_list_every_event_as_the_table_defines_it() {
    let docs =
        std::fs::read_to_string(thrtrace_tests::workspace_root().join("docs/events.md")).unwrap();
    let rows: Vec<String> = EVENTS.iter().map(row).collect();
    let missing: Vec<&String> = rows.iter().filter(|r| !docs.contains(r.as_str())).collect();
    assert!(
        missing.is_empty(),
        "docs/events.md lacks {} event rows; its table of events should read:\n\n\
         | category | codes | event | glibc function | record (which: a1 · a2 · a3 · a4 · a5) | return record |\n\
         |---|---|---|---|---|---|\n{}\n",
        missing.len(),
        rows.join("\n")
    );
}
