//! The self-contained `report.html`: inline CSS and JS, the report as JSON in a
//! `<script type="application/json">` block, charts drawn as SVG by the page itself. It opens
//! offline: nothing is fetched.

use super::{Report, ReportError};

const CSS: &str = include_str!("report.css");
const JS: &str = include_str!("report.js");

// Runs before everything else so that any script error, rejected promise or console.error ends
// up in the DOM as `.error` (headless checks read the DOM, not a console).
const ERROR_TRAP: &str = r"(function () {
  function record(msg) {
    var d = document.createElement('div');
    d.className = 'error';
    d.textContent = 'script error: ' + msg;
    (document.body || document.documentElement).appendChild(d);
  }
  window.onerror = function (msg, src, line) { record(String(msg) + ' (line ' + line + ')'); };
  window.addEventListener('unhandledrejection', function (e) { record(String(e.reason)); });
  var original = console.error;
  console.error = function () {
    record(Array.prototype.join.call(arguments, ' '));
    original.apply(console, arguments);
  };
})();";

/// Renders `report` as one HTML page.
pub fn render(report: &Report) -> Result<String, ReportError> {
    let data = escape_script_json(&serde_json::to_string(report)?);
    let title = escape_text(&format!("inferscope report: {}", report.run.scenario));
    // What the run ran against and on, one line under the run's own (`measure::provenance`).
    let provenance = escape_text(&report.run.provenance.summary());
    Ok(format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>\n{CSS}</style>\n<script>\n{ERROR_TRAP}\n</script>\n\
         </head>\n<body data-rendered=\"no\">\n<header><h1>{title}</h1>\
         <div class=\"meta\" id=\"run-meta\"></div>\
         <div class=\"meta\" id=\"run-provenance\">{provenance}</div></header>\n\
         <main id=\"app\"></main>\n\
         <script type=\"application/json\" id=\"report-data\">{data}</script>\n\
         <script>\n{JS}</script>\n</body>\n</html>\n"
    ))
}

/// Makes JSON safe inside a `<script>` element: `</script>`, `<!--` and `]]>` cannot appear,
/// and the JSON still parses to the same value (the escapes are JSON string escapes; outside
/// strings JSON has no `<`, `>` or `&`).
#[must_use]
pub fn escape_script_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes text for HTML element content.
fn escape_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_json_cannot_close_the_script_and_round_trips() {
        let v = serde_json::json!({ "scenario": "</script><script>alert(1)</script><!-- & ]]>" });
        let escaped = escape_script_json(&v.to_string());
        assert!(!escaped.contains("</"));
        assert!(!escaped.contains("<!--"));
        assert!(!escaped.contains('>'));
        let back: serde_json::Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn title_is_escaped() {
        assert_eq!(escape_text("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}
