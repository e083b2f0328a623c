//! Picking containers out of an inventory by the names the user gave (`--container NAME`,
//! repeatable, or `--all`).
//!
//! One method, [`Inventory::select`], serves every step: `plan`, `deploy` and `snapshot`
//! select everything when no name is given, `provision` only with `--all` and `destroy` never
//! (they change containers, so an empty selection must be a deliberate `--all`). The unknown-name
//! error has two wordings ([`NotFound`]) because `configure` has always said "in the inventory"
//! and the others "in stage `…`"; both are part of the CLI's output that tests and users see.

use super::{ContainerSpec, Inventory};
use crate::error::{Error, Location, Problems, Result};

/// How [`Inventory::select`] words an unknown name (the `--container (NAME): …` problem).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotFound {
    /// ``no container `NAME` in stage `STAGE`; known: a, b`` (plan, provision, destroy, deploy,
    /// snapshot).
    InStage,
    /// ``no container named `NAME` in the inventory (known: a, b)`` (configure).
    InInventory,
}

impl Inventory {
    /// The containers named in `names` (lib name or hostname, see [`Inventory::container`]), in
    /// the order given, each once; when `names` is empty, every container in inventory order if
    /// `all_when_empty`, else a usage error.
    ///
    /// Pass `all_when_empty = true` for read-only steps (an empty `--container` list means "all")
    /// and the value of `--all` for steps that change containers.
    ///
    /// # Errors
    /// * [`Error::Usage`] (`give --container NAME (repeatable) or --all`) when `names` is empty
    ///   and `all_when_empty` is false;
    /// * [`Error::Input`] with one problem per unknown name at `--container (NAME)`, listing the
    ///   known containers, worded as `not_found` says.
    pub fn select(&self, names: &[String], all_when_empty: bool, not_found: NotFound) -> Result<Vec<&ContainerSpec>> {
        if names.is_empty() {
            if !all_when_empty {
                return Err(Error::Usage("give --container NAME (repeatable) or --all".into()));
            }
            return Ok(self.containers.iter().collect());
        }
        let mut out: Vec<&ContainerSpec> = Vec::new();
        let mut problems = Problems::new();
        for n in names {
            match self.container(n) {
                Some(c) => {
                    if !out.iter().any(|o| o.name == c.name) {
                        out.push(c)
                    }
                }
                None => problems.add(Location::file("--container").with_key(n), self.not_found(n, not_found)),
            }
        }
        problems.into_result()?;
        Ok(out)
    }

    fn not_found(&self, name: &str, wording: NotFound) -> String {
        let known = self.containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ");
        match wording {
            NotFound::InStage => format!("no container `{name}` in stage `{}`; known: {known}", self.stage),
            NotFound::InInventory => format!("no container named `{name}` in the inventory (known: {known})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::inventory::IpConfig;

    fn inv() -> Inventory {
        let mut beta = ContainerSpec::new("beta", 102, IpConfig::Dhcp);
        beta.hostname = "dev-beta".into();
        Inventory {
            root: "/repo".into(),
            stage: "dev".into(),
            head: None,
            containers: vec![ContainerSpec::new("alpha", 101, IpConfig::Dhcp), beta],
            submodules: vec![],
            globals: BTreeMap::new(),
            tasks: vec![],
            configs: vec![],
            base: None,
            libraries: None,
            settings: crate::settings::Settings::load(std::path::Path::new("/nonexistent"), &BTreeMap::new())
                .unwrap()
                .public(),
        }
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn selected(r: Result<Vec<&ContainerSpec>>) -> Vec<String> {
        r.unwrap().into_iter().map(|c| c.name.clone()).collect()
    }

    #[test]
    fn empty_selects_all_or_is_a_usage_error() {
        let inv = inv();
        assert_eq!(selected(inv.select(&[], true, NotFound::InStage)), names(&["alpha", "beta"]));
        let e = inv.select(&[], false, NotFound::InStage).unwrap_err();
        assert!(matches!(&e, Error::Usage(m) if m == "give --container NAME (repeatable) or --all"), "{e:?}");
    }

    #[test]
    fn names_in_given_order_once_by_name_or_hostname() {
        let inv = inv();
        let got = inv.select(&names(&["dev-beta", "alpha", "beta"]), false, NotFound::InStage);
        assert_eq!(selected(got), names(&["beta", "alpha"]));
    }

    #[test]
    fn unknown_names_in_both_wordings() {
        let inv = inv();
        let msg = |w| match inv.select(&names(&["nope", "alpha", "gone"]), true, w).unwrap_err() {
            Error::Input(p) => p.iter().map(|p| format!("{p}")).collect::<Vec<_>>(),
            e => panic!("{e:?}"),
        };
        assert_eq!(
            msg(NotFound::InStage),
            vec![
                "--container (nope): no container `nope` in stage `dev`; known: alpha, beta",
                "--container (gone): no container `gone` in stage `dev`; known: alpha, beta",
            ]
        );
        assert_eq!(
            msg(NotFound::InInventory),
            vec![
                "--container (nope): no container named `nope` in the inventory (known: alpha, beta)",
                "--container (gone): no container named `gone` in the inventory (known: alpha, beta)",
            ]
        );
    }
}
