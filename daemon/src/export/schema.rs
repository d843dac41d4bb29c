//! JSON Schemas (draft 2020-12) of the two report formats, generated from the report types
//! themselves (schemars reads their serde attributes), so a schema cannot drift from what is
//! written: `stress --out report.json` ([`crate::measure::StressReport`]) and the explained
//! `report.json` of `stress --explain` ([`crate::export::report::Report`]). Checked in under
//! `docs/schema/`; a test fails when the checked-in files differ from the generated ones
//! (`INFERSCOPE_WRITE_SCHEMA=1 cargo test -p inferscope --lib schema` rewrites them).

use serde_json::Value;

/// A report format and its schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The load generator's `report.json` (`inferscope.stress.report`).
    Stress,
    /// The explained `report.json` (time line, verdicts, phases, waterfalls).
    Explain,
}

impl Format {
    /// Both formats.
    pub const ALL: [Format; 2] = [Format::Stress, Format::Explain];

    /// File name under `docs/schema/`.
    #[must_use]
    pub fn file_name(self) -> &'static str {
        match self {
            Format::Stress => "stress-report.schema.json",
            Format::Explain => "explain-report.schema.json",
        }
    }

    /// The schema, with its `$id` and `title`.
    #[must_use]
    pub fn schema(self) -> Value {
        let (mut schema, title) = match self {
            Format::Stress => (
                schemars::schema_for!(crate::measure::StressReport),
                "inferscope stress report (stress --out report.json)",
            ),
            Format::Explain => (
                schemars::schema_for!(crate::export::report::Report),
                "inferscope explained report (stress --explain: report.json)",
            ),
        };
        schema.insert(
            "$id".into(),
            format!(
                "https://github.com/inferscope/inferscope/docs/schema/{}",
                self.file_name()
            )
            .into(),
        );
        schema.insert("title".into(), title.into());
        schema.to_value()
    }

    /// The schema as written to `docs/schema/` (pretty, one trailing newline).
    #[must_use]
    pub fn text(self) -> String {
        let mut s = serde_json::to_string_pretty(&self.schema()).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Checks `report` against the schema: every violation, one line each (path: what).
    pub fn check(self, report: &Value) -> Result<(), Vec<String>> {
        let schema = self.schema();
        let validator = jsonschema::validator_for(&schema).map_err(|e| vec![e.to_string()])?;
        let errors: Vec<String> = validator
            .iter_errors(report)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked_in(f: Format) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../docs/schema")
            .join(f.file_name())
    }

    #[test]
    fn the_checked_in_schemas_are_the_generated_ones() {
        for f in Format::ALL {
            let path = checked_in(f);
            if std::env::var_os("INFERSCOPE_WRITE_SCHEMA").is_some() {
                std::fs::write(&path, f.text()).unwrap();
            }
            let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                on_disk == f.text(),
                "{} differs from the report types: INFERSCOPE_WRITE_SCHEMA=1 cargo test -p inferscope --lib schema",
                path.display()
            );
        }
    }

    #[test]
    fn a_report_of_the_wrong_shape_is_refused() {
        let errors = Format::Stress
            .check(&serde_json::json!({"schema": "inferscope.stress.report", "phases": 3}))
            .unwrap_err();
        assert!(errors.iter().any(|e| e.contains("version")), "{errors:?}");
        assert!(
            errors.iter().any(|e| e.starts_with("/phases")),
            "{errors:?}"
        );
    }
}
