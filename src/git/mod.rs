//! git: the one door to repositories, in two halves by the tool that does the work.
//!
//! * [`submodules`] — reads a working tree's submodule tree with gix, in process: no `git`
//!   process, no network, no credentials (what `resolve` needs, fast and side-effect free);
//! * [`command`] — the `git` command-line tool for what gix cannot do: push and fetch over HTTP
//!   with credentials passed through `GIT_ASKPASS`, deterministic commits, submodule
//!   bookkeeping in a working copy (what `rewrite` and `publish` need).
//!
//! Both are re-exported here, so callers write `crate::git::read_tree` or `crate::git::Git`.

pub mod command;
pub mod submodules;

pub use command::{Credentials, Git, GitError, TOOL_IDENTITY};
pub use submodules::{MAX_DEPTH, Tree, flatten, read_tree};
