//! The `proxmox-gitops` binary: see `proxmox_gitops::cli`.

fn main() {
    std::process::exit(proxmox_gitops::cli::main());
}
