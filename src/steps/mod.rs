//! The pipeline steps. Each step is a library function taking typed inputs (artifacts and
//! options) and returning a typed artifact; the CLI only parses arguments and calls them.

pub mod auto_merge;
pub mod configure;
pub mod deploy;
pub mod destroy;
pub mod drift;
pub mod health;
pub mod plan;
pub mod provision;
pub mod publish;
pub mod release_pr;
pub mod render_workflows;
pub mod resolve;
pub mod rewrite;
pub mod snapshot;
pub mod update;
