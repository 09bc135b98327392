//! Garrison's integration tests, one binary: one module per area, each
//! running the real `garrison` binary (or its parts) end to end. One binary
//! links the workspace once instead of once per file.

mod bucket;
mod cli;
mod common;

mod admin_e2e;
mod bench_sandbox;
mod bench_scale;
mod chaos;
mod chromium_e2e;
mod claims_e2e;
mod cli_conventions;
mod cli_e2e;
mod connect_cli;
mod dashboard_browser;
mod demo_e2e;
mod deploy_modal;
mod deploy_tensorlake;
mod desktop_e2e;
mod doctor_cli;
mod emulate_cli;
mod image_modal;
mod image_recipes;
mod image_tensorlake;
mod logs_tensorlake;
mod mock_cli;
mod multi_host;
mod outposts_cli;
mod package_install;
mod packaging;
mod platform_e2e;
mod repos_e2e;
mod serve_bad_input;
mod serve_disk_full;
mod serve_e2e;
mod serve_lifecycle;
mod serve_object_store;
mod serve_transient;
mod serve_vanished;
mod settings_cli;
mod token_isolation;
