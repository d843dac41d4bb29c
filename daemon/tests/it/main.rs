//! The daemon's integration tests: one binary, each file a module. Two tests have binaries of
//! their own because they touch the whole process: `otlp_env` sets its environment,
//! `otlp_memory` measures its memory.
mod api_hardening;
mod api_runs;
mod completions;
mod control_api;
mod fd_limit;
mod hostile_flags;
mod hung_support;
mod loadgen_bounds;
mod loadgen_measures;
mod loadgen_pause;
mod loadgen_rate;
mod loadgen_scenario;
mod loadgen_support;
mod otlp_collector_double;
mod otlp_export;
mod otlp_fixtures;
mod parsers_prop;
mod phase_end;
mod prometheus_exposition;
mod report_html;
mod report_merge;
mod scrape_http;
mod sim_api;
mod sim_bench;
mod sim_binary;
mod sim_clients;
mod sim_common;
mod sim_fixed;
mod sim_kv_pressure;
mod sim_process;
mod stress_models;
mod stress_otlp;
mod stress_signals;
mod stress_tls;
mod workload;
