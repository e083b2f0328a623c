//! `render-workflows`: the per-lib pipeline rendered from the handlebars template, parsed back as
//! YAML and checked for structure, escaping and errors.

mod support;

use std::path::Path;
use std::process::Command;

use pretty_assertions::assert_eq;
use proxmox_gitops::steps::render_workflows::{
    BUILTIN_TEMPLATE, LibPipelineVars, RenderOptions, Rendered, render, render_workflows,
};
use support::deploy::{inventory, monorepo};
use support::fs::write_files;

/// YAML (one document) → JSON, for whole-structure assertions.
fn yaml_to_json(text: &str) -> serde_json::Value {
    fn conv(y: &yaml_rust2::Yaml) -> serde_json::Value {
        use yaml_rust2::Yaml;
        match y {
            Yaml::String(s) => s.clone().into(),
            Yaml::Integer(i) => (*i).into(),
            Yaml::Real(r) => r.parse::<f64>().map(Into::into).unwrap_or_else(|_| r.clone().into()),
            Yaml::Boolean(b) => (*b).into(),
            Yaml::Null => serde_json::Value::Null,
            Yaml::Array(a) => a.iter().map(conv).collect::<Vec<_>>().into(),
            Yaml::Hash(h) => h
                .iter()
                .map(|(k, v)| (k.as_str().expect("string keys").to_string(), conv(v)))
                .collect::<serde_json::Map<_, _>>()
                .into(),
            other => panic!("unexpected YAML node {other:?}"),
        }
    }
    let docs = yaml_rust2::YamlLoader::load_from_str(text).unwrap();
    assert_eq!(docs.len(), 1);
    conv(&docs[0])
}

fn vars(lib: &str, runs_on: &str) -> LibPipelineVars {
    LibPipelineVars {
        lib: lib.into(),
        lib_dir: format!("libs/{lib}"),
        monorepo: "srv/config".into(),
        runs_on: runs_on.into(),
    }
}

#[test]
fn renders_every_lib_and_the_workflow_has_the_expected_structure() {
    let repo = monorepo(&["alpha", "beta"]);
    let root = repo.path();
    let inv = inventory(root);
    let opts = RenderOptions { libs: vec![], monorepo: "srv/config".into(), runs_on: "shell".into() };
    let written = render_workflows(root, &inv, &opts).unwrap();
    assert_eq!(
        written,
        vec![
            Rendered { lib: "alpha".into(), path: "libs/alpha/.gitea/workflows/pipeline.yml".into(), changed: true },
            Rendered { lib: "beta".into(), path: "libs/beta/.gitea/workflows/pipeline.yml".into(), changed: true },
        ]
    );
    assert!(!root.join(".gitea").exists(), "the control plane gets no lib pipeline");
    let text = std::fs::read_to_string(root.join("libs/alpha/.gitea/workflows/pipeline.yml")).unwrap();
    let wf = yaml_to_json(&text);
    assert_eq!(wf["name"], "deploy alpha");
    assert_eq!(
        wf["on"],
        serde_json::json!({
            "push": {"branches": ["release", "main"]},
            "workflow_dispatch": {"inputs": {"step": {
                "description": "deploy (the branch's steps), provision, configure or snapshot",
                "required": false, "default": "deploy", "type": "choice",
                "options": ["deploy", "provision", "configure", "snapshot"]}}}
        })
    );
    // One group per monorepo and stage, never cancelling a deploy: the monorepo is rendered in
    // (`github.repository` is the lib's repository in this workflow).
    assert_eq!(
        wf["concurrency"],
        serde_json::json!({
            "group": "proxmox-gitops-srv/config-${{ vars.PROXMOX_GITOPS_STAGE || 'main' }}",
            "cancel-in-progress": false
        })
    );
    let env = wf["env"].as_object().unwrap();
    assert_eq!(env["PROXMOX_PASSWORD"], "${{ secrets.PROXMOX_PASSWORD }}");
    assert_eq!(env["PROXMOX_HOST"], "${{ vars.PROXMOX_HOST }}");
    assert_eq!(env["PASSWORD"], "${{ secrets.PASSWORD }}");
    assert_eq!(env["LOGIN"], "${{ vars.LOGIN }}");
    assert_eq!(env["PROXMOX_FINGERPRINT"], "${{ vars.PROXMOX_FINGERPRINT }}");
    assert_eq!(env["PROXMOX_CA"], "${{ vars.PROXMOX_CA }}");
    assert_eq!(env.len(), 20);
    assert_eq!(
        wf["jobs"],
        serde_json::json!({"deploy": {
            "runs-on": "shell",
            "steps": [
                {"name": "Check out the monorepo", "uses": "actions/checkout@v4", "with": {
                    "repository": "srv/config", "ref": "${{ github.ref_name }}", "submodules": "recursive",
                    "token": "${{ secrets.GITEA_TOKEN || github.token }}"}},
                {"name": "Check out this lib at the pushed commit", "uses": "actions/checkout@v4",
                 "with": {"path": "libs/alpha"}},
                {"name": "Deploy alpha", "id": "deploy", "uses": "./", "with": {
                    "step": "${{ github.event.inputs.step || 'deploy' }}",
                    "container": "alpha",
                    "backend": "${{ vars.PROXMOX_GITOPS_BACKEND }}",
                    "stage": "${{ vars.PROXMOX_GITOPS_STAGE }}",
                    "binary": "${{ vars.PROXMOX_GITOPS_BINARY }}",
                    "artifacts": "${{ vars.PROXMOX_GITOPS_ARTIFACTS }}"}}
            ]
        }})
    );
    // Rendering again changes nothing.
    let again = render_workflows(root, &inv, &opts).unwrap();
    assert!(again.iter().all(|r| !r.changed));
}

#[test]
fn values_are_escaped_for_yaml_and_refused_when_actions_would_evaluate_them() {
    let hostile = "she\"ll: [x] # \\ {y}";
    let text = render(Path::new("t.hbs"), BUILTIN_TEMPLATE, &vars("alpha", hostile)).unwrap();
    assert_eq!(yaml_to_json(&text)["jobs"]["deploy"]["runs-on"], hostile);

    let e = render(Path::new("t.hbs"), BUILTIN_TEMPLATE, &vars("alpha", "${{ secrets.PASSWORD }}")).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert_eq!(
        e.to_string(),
        "1 problem in the input:\n  t.hbs (runs_on): `runs_on` must not contain `${{` (Actions would evaluate it as an expression)\n"
    );
    let e = render(Path::new("t.hbs"), BUILTIN_TEMPLATE, &vars("alpha", "a\nb: c")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "1 problem in the input:\n  t.hbs (runs_on): `runs_on` must not contain control characters or line breaks\n"
    );
}

#[test]
fn a_custom_template_in_the_monorepo_is_used_and_its_errors_name_it() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let inv = inventory(root);
    let opts = RenderOptions { libs: vec!["alpha".into()], monorepo: "srv/config".into(), runs_on: "shell".into() };
    let tpl = "workflows/templates/lib_pipeline.yml.hbs";

    write_files(
        root,
        &[(tpl, "on: push\njobs:\n  x:\n    runs-on: \"{{runs_on}}\"\n    name: \"{{lib}} in {{monorepo}}\"\n")],
    );
    render_workflows(root, &inv, &opts).unwrap();
    let wf = yaml_to_json(&std::fs::read_to_string(root.join("libs/alpha/.gitea/workflows/pipeline.yml")).unwrap());
    assert_eq!(
        wf,
        serde_json::json!({"on": "push", "jobs": {"x": {"runs-on": "shell", "name": "alpha in srv/config"}}})
    );

    write_files(root, &[(tpl, "on: push\njobs:\n  x:\n    runs-on: \"{{runner}}\"\n")]);
    let e = render_workflows(root, &inv, &opts).unwrap_err();
    assert!(
        e.to_string().starts_with(
            "1 problem in the input:\n  workflows/templates/lib_pipeline.yml.hbs:4: cannot render the template:"
        ),
        "{e}"
    );
    assert!(e.to_string().contains("runner"), "{e}");

    write_files(root, &[(tpl, "on: push\njobs: [\n")]);
    let e = render_workflows(root, &inv, &opts).unwrap_err();
    assert!(
        e.to_string().starts_with(
            "1 problem in the input:\n  workflows/templates/lib_pipeline.yml.hbs: the rendered workflow is not valid YAML"
        ),
        "{e}"
    );
    write_files(root, &[(tpl, "jobs: {}\n")]);
    let e = render_workflows(root, &inv, &opts).unwrap_err();
    assert_eq!(
        e.to_string(),
        "1 problem in the input:\n  workflows/templates/lib_pipeline.yml.hbs: the rendered workflow must be one YAML mapping with the keys `on` and `jobs`\n"
    );
}

#[test]
fn bad_selections_are_input_errors() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let inv = inventory(root);
    let opts = |libs: &[&str], monorepo: &str| RenderOptions {
        libs: libs.iter().map(|s| s.to_string()).collect(),
        monorepo: monorepo.into(),
        runs_on: "shell".into(),
    };
    let e = render_workflows(root, &inv, &opts(&["config", "nope"], "srv")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "3 problems in the input:\n  \
         --lib (config): the control plane is the monorepo itself; it runs workflows/pipeline.yml, not a lib pipeline\n  \
         --lib (nope): no lib `nope`; known: alpha\n  \
         --monorepo: expected the monorepo as owner/repo (letters, digits, `-_.`), found `srv`\n"
    );
    assert!(!root.join("libs/alpha/.gitea").exists());
}

#[test]
fn the_cli_renders_for_one_lib() {
    let repo = monorepo(&["alpha", "beta"]);
    let root = repo.path();
    let out = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .args(["--repo"])
        .arg(root)
        .args(["render-workflows", "--lib", "beta", "--monorepo", "srv/config"])
        .env_remove("GITHUB_REPOSITORY")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "LIB   FILE                                     STATE\nbeta  libs/beta/.gitea/workflows/pipeline.yml  written\n"
    );
    assert!(root.join("libs/beta/.gitea/workflows/pipeline.yml").is_file());
    assert!(!root.join("libs/alpha/.gitea").exists());
}

/// The monorepo's own workflows and a rendered lib pipeline land in the same concurrency group
/// once `${{ github.repository }}` (the monorepo, in the monorepo's workflows) is substituted.
#[test]
fn lib_and_monorepo_workflows_share_one_concurrency_group_per_stage() {
    let lib = yaml_to_json(&render(Path::new("t.hbs"), BUILTIN_TEMPLATE, &vars("alpha", "shell")).unwrap());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in ["workflows/pipeline.yml", "workflows/snapshot.yml"] {
        let wf = yaml_to_json(&std::fs::read_to_string(root.join(file)).unwrap());
        assert_eq!(wf["concurrency"]["cancel-in-progress"], false, "{file}");
        let group = wf["concurrency"]["group"].as_str().unwrap_or_else(|| panic!("{file}: no concurrency group"));
        assert_eq!(group.replace("${{ github.repository }}", "srv/config"), lib["concurrency"]["group"], "{file}");
    }
}
