//! Provisioning backends: each compares a container spec with the live container, plans, and
//! executes the plan into a [`crate::provision::Provision`] artifact.

pub mod lxc;
