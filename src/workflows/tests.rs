//! Rendering the task workflow and the lib pipeline, installing the static workflows: structure,
//! the optional schedule, escaping, the checkout action.

use super::*;

fn task(cron: Option<&str>) -> TaskVars {
    TaskVars {
        task: "health".into(),
        task_dir: "tasks/health".into(),
        script: "tasks/health/default.sh".into(),
        cron: cron.map(String::from),
        monorepo: "srv/config".into(),
        monorepo_ref: "main".into(),
        runs_on: "shell".into(),
        checkout: ACTIONS_CHECKOUT.into(),
    }
}

fn yaml(text: &str) -> yaml_rust2::Yaml {
    let mut docs = yaml_rust2::YamlLoader::load_from_str(text).unwrap();
    assert_eq!(docs.len(), 1);
    docs.remove(0)
}

fn tpl() -> &'static Path {
    Path::new(TASK_TEMPLATE_PATH)
}

#[test]
fn escapes_for_double_quoted_yaml() {
    assert_eq!(yaml_escape(r#"a"b\c"#), r#"a\"b\\c"#);
    assert_eq!(yaml_escape("x\ny\u{1}"), "x\\ny\\x01");
    assert_eq!(yaml_escape("plain-lib"), "plain-lib");
}

#[test]
fn repo_names() {
    assert!(is_repo_name("srv/config"));
    assert!(is_repo_name("my.org/mono_repo-1"));
    assert!(!is_repo_name("srv"));
    assert!(!is_repo_name("srv/con fig"));
    assert!(!is_repo_name("../x"));
    assert!(!is_repo_name("a/b/c"));
}

#[test]
fn task_with_a_cron_line_is_scheduled() {
    let text = render(tpl(), TASK_TEMPLATE, &task(Some("0 */3 * * *"))).unwrap();
    let wf = yaml(&text);
    let on = &wf["on"];
    assert_eq!(on["push"]["branches"][0].as_str(), Some("main"));
    assert!(on["push"]["branches"][1].is_badvalue());
    assert!(!on["workflow_dispatch"].is_badvalue(), "dispatch is always there");
    assert_eq!(on["schedule"][0]["cron"].as_str(), Some("0 */3 * * *"));
    assert_eq!(on.as_hash().unwrap().len(), 3);
    assert_eq!(wf["name"].as_str(), Some("task health"));
    assert_eq!(wf["concurrency"]["group"].as_str(), Some("proxmox-gitops-task-srv/config-health"));
    assert_eq!(wf["concurrency"]["cancel-in-progress"].as_bool(), Some(false));
}

#[test]
fn task_without_a_cron_line_has_no_schedule() {
    let text = render(tpl(), TASK_TEMPLATE, &task(None)).unwrap();
    let wf = yaml(&text);
    let keys: Vec<&str> = wf["on"].as_hash().unwrap().keys().map(|k| k.as_str().unwrap()).collect();
    assert_eq!(keys, vec!["push", "workflow_dispatch"]);
    assert!(!text.contains("schedule:"), "{text}");
    assert!(!text.contains("cron:"), "{text}");
}

#[test]
fn task_job_checks_out_gets_the_binary_and_runs_the_script_through_env() {
    let text = render(tpl(), TASK_TEMPLATE, &task(None)).unwrap();
    let wf = yaml(&text);
    let job = &wf["jobs"]["task"];
    assert_eq!(job["runs-on"].as_str(), Some("shell"));
    let steps = job["steps"].as_vec().unwrap();
    assert_eq!(steps.len(), 5);
    assert_eq!(steps[0]["uses"].as_str(), Some("actions/checkout@v4"));
    assert_eq!(steps[0]["with"]["repository"].as_str(), Some("srv/config"));
    assert_eq!(steps[0]["with"]["ref"].as_str(), Some("main"));
    assert_eq!(steps[0]["with"]["submodules"].as_str(), Some("recursive"));
    assert_eq!(steps[0]["with"]["token"].as_str(), Some("${{ secrets.GITEA_TOKEN || github.token }}"));
    assert_eq!(steps[1]["uses"].as_str(), Some("actions/checkout@v4"));
    assert_eq!(steps[1]["with"]["path"].as_str(), Some("tasks/health"));
    assert_eq!(steps[2]["uses"].as_str(), Some("./"));
    assert_eq!(steps[2]["with"]["step"].as_str(), Some("setup"));
    assert_eq!(steps[2]["with"]["binary"].as_str(), Some("${{ vars.PROXMOX_GITOPS_BINARY }}"));
    let run = &steps[3];
    assert_eq!(run["env"]["PROXMOX_GITOPS"].as_str(), Some("${{ steps.setup.outputs.binary }}"));
    assert_eq!(run["env"]["PGO_REPO"].as_str(), Some("${{ github.workspace }}"));
    assert_eq!(run["env"]["PGO_TASK_SCRIPT"].as_str(), Some("tasks/health/default.sh"));
    // The script text holds no rendered value: they all go through env.
    let script = run["run"].as_str().unwrap();
    for value in ["tasks/health", "srv/config", "health"] {
        assert!(!script.contains(value), "{value} pasted into the script:\n{script}");
    }
    assert_eq!(steps[4]["run"].as_str(), Some("exit \"${PGO_SCRIPT_RC:-1}\""));
    // The settings environment of the pipeline, plus the task's own.
    let env = wf["env"].as_hash().unwrap();
    for key in [
        "PROXMOX_HOST",
        "PROXMOX_PASSWORD",
        "PROXMOX_SECRET",
        "HOST",
        "LOGIN",
        "PASSWORD",
        "GITEA_TOKEN",
        "AUTO_DEPLOY",
        "PROXMOX_GITOPS_STAGE",
        "PROXMOX_GITOPS_BACKEND",
        "PROXMOX_GITOPS_RECREATE",
        "PROXMOX_GITOPS_MONOREPO",
    ] {
        assert!(env.contains_key(&yaml_rust2::Yaml::String(key.into())), "{key}");
    }
    assert_eq!(wf["env"]["PROXMOX_GITOPS_MONOREPO"].as_str(), Some("srv/config"));
    assert_eq!(wf["env"]["PASSWORD"].as_str(), Some("${{ secrets.PASSWORD }}"));
    // The pipeline maps the same settings (the shipped pipeline.yml's env is a subset).
    let pipeline = yaml(PIPELINE);
    for (k, v) in pipeline["env"].as_hash().unwrap() {
        assert_eq!(wf["env"][k.as_str().unwrap()], *v, "{k:?}");
    }
}

#[test]
fn hostile_values_are_escaped_or_refused() {
    let mut v = task(None);
    v.script = "tasks/we\"ird/run it.sh".into();
    v.task_dir = "tasks/we\"ird".into();
    let wf = yaml(&render(tpl(), TASK_TEMPLATE, &v).unwrap());
    assert_eq!(wf["jobs"]["task"]["steps"][3]["env"]["PGO_TASK_SCRIPT"].as_str(), Some("tasks/we\"ird/run it.sh"));
    assert_eq!(wf["jobs"]["task"]["steps"][1]["with"]["path"].as_str(), Some("tasks/we\"ird"));

    let mut v = task(None);
    v.script = "tasks/x/${{ secrets.PASSWORD }}.sh".into();
    let e = render(tpl(), TASK_TEMPLATE, &v).unwrap_err();
    assert_eq!(
        e.to_string(),
        "1 problem in the input:\n  workflows/templates/task.yml.hbs (script): `script` must not contain `${{` (Actions \
         would evaluate it as an expression)\n"
    );
    let e = render(tpl(), TASK_TEMPLATE, &task(Some("0 3 * * *\"\n  x: y"))).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("(cron): `cron` must not contain control characters"), "{text}");
    assert!(text.contains("(cron): invalid cron expression"), "{text}");
}

#[test]
fn the_checkout_action_is_rendered_and_a_bad_one_refused() {
    let mut v = task(Some("0 3 * * *"));
    v.checkout = "http://10.0.3.2:8080/tasks/checkout@v4".into();
    let wf = yaml(&render(tpl(), TASK_TEMPLATE, &v).unwrap());
    for i in [0, 1] {
        assert_eq!(wf["jobs"]["task"]["steps"][i]["uses"].as_str(), Some("http://10.0.3.2:8080/tasks/checkout@v4"));
    }
    let lib = LibPipelineVars {
        lib: "alpha".into(),
        lib_dir: "libs/alpha".into(),
        monorepo: "srv/config".into(),
        runs_on: "shell".into(),
        checkout: "tasks/checkout@main".into(),
    };
    let wf = yaml(&render(Path::new(LIB_TEMPLATE_PATH), LIB_TEMPLATE, &lib).unwrap());
    for i in [0, 1] {
        assert_eq!(wf["jobs"]["deploy"]["steps"][i]["uses"].as_str(), Some("tasks/checkout@main"));
    }
    v.checkout = "checkout\" # x".into();
    let e = render(tpl(), TASK_TEMPLATE, &v).unwrap_err();
    assert!(e.to_string().contains("task.yml.hbs (checkout): expected `git` (the default"), "{e}");
}

#[test]
fn static_workflows_get_the_checkout_action_only_where_they_use_actions_checkout() {
    let src = Source { path: PIPELINE_PATH, text: PIPELINE.into(), builtin: true };
    let script = Source { path: checkout::SCRIPT_PATH, text: checkout::SCRIPT.into(), builtin: true };
    let actions = CheckoutAction::parse(ACTIONS_CHECKOUT).unwrap();
    assert_eq!(install_static(&src, &actions, &script).unwrap(), PIPELINE, "actions/checkout@v4 leaves it as is");
    let checkout = CheckoutAction::parse("tasks/checkout@main").unwrap();
    let text = install_static(&src, &checkout, &script).unwrap();
    assert_eq!(
        text.matches("uses: \"tasks/checkout@main\"").count(),
        PIPELINE.matches("uses: actions/checkout@v4").count()
    );
    assert!(!text.contains("actions/checkout@v4"), "{text}");
    assert_eq!(text.lines().count(), PIPELINE.lines().count());
    let wf = yaml(&text);
    assert_eq!(wf["jobs"]["deploy"]["steps"][0]["uses"].as_str(), Some("tasks/checkout@main"));
    assert_eq!(wf["jobs"]["deploy"]["steps"][1]["uses"].as_str(), Some("./"));
    // Only exact `uses:` lines; a comment or another version stays.
    let other = Source {
        path: SNAPSHOT_PATH,
        text: "# uses: actions/checkout@v4\non: push\njobs:\n  x:\n    steps:\n      - uses: actions/checkout@v4\n      - uses: actions/checkout@v3\n".into(),
        builtin: false,
    };
    assert_eq!(
        install_static(&other, &checkout, &script).unwrap(),
        "# uses: actions/checkout@v4\non: push\njobs:\n  x:\n    steps:\n      - uses: \"tasks/checkout@main\"\n      - uses: actions/checkout@v3\n"
    );
    let broken = Source { path: SNAPSHOT_PATH, text: "on: [\n".into(), builtin: false };
    assert!(
        install_static(&broken, &checkout, &script)
            .unwrap_err()
            .to_string()
            .contains("workflows/snapshot.yml: the rendered workflow is not valid YAML")
    );
}

#[test]
fn the_default_installs_git_steps_in_every_job_of_the_shipped_workflows() {
    let script = Source { path: checkout::SCRIPT_PATH, text: checkout::SCRIPT.into(), builtin: true };
    for (_, path, text) in MONOREPO_FILES {
        let src = Source { path, text: text.into(), builtin: true };
        let out = install_static(&src, &CheckoutAction::default(), &script).unwrap();
        assert!(!out.contains("uses: actions/checkout"), "{path}");
        let wf = yaml(&out);
        let jobs = wf["jobs"].as_hash().unwrap();
        let embedded = checkout::embedded(checkout::SCRIPT);
        // Every checkout step became the script (drift.yml checks out twice: release, then the
        // run's commit for what is pending), and every job starts with one.
        let steps = jobs.values().flat_map(|j| j["steps"].as_vec().cloned().unwrap_or_default());
        let checkouts = steps.filter(|s| s["run"].as_str() == Some(embedded.as_str())).count();
        assert_eq!(checkouts, text.matches("uses: actions/checkout@v4").count(), "{path}");
        assert!(jobs.values().all(|j| j["steps"][0]["run"].as_str() == Some(embedded.as_str())), "{path}");
        for job in jobs.values().filter(|j| j["steps"][0]["run"].as_str().is_some()) {
            let step = &job["steps"][0];
            assert_eq!(step["shell"].as_str(), Some("bash"));
            assert_eq!(step["env"]["PGO_CHECKOUT_SUBMODULES"].as_str(), Some("recursive"), "{path}");
            assert_eq!(
                step["env"]["PGO_CHECKOUT_TOKEN"].as_str(),
                Some("${{ secrets.GITEA_TOKEN || github.token }}"),
                "{path}"
            );
        }
    }
    // The templates: the monorepo at the pushed ref, then the lib (or task) at the run's commit.
    let lib = LibPipelineVars {
        lib: "alpha".into(),
        lib_dir: "libs/alpha".into(),
        monorepo: "srv/config".into(),
        runs_on: "shell".into(),
        checkout: CheckoutAction::default().uses().into(),
    };
    let text = render(Path::new(LIB_TEMPLATE_PATH), LIB_TEMPLATE, &lib).unwrap();
    let text = finish_checkout(Path::new(LIB_TEMPLATE_PATH), text, &CheckoutAction::default(), &script).unwrap();
    let wf = yaml(&text);
    let steps = &wf["jobs"]["deploy"]["steps"];
    assert_eq!(steps[0]["env"]["PGO_CHECKOUT_REPOSITORY"].as_str(), Some("srv/config"));
    assert_eq!(steps[0]["env"]["PGO_CHECKOUT_REF"].as_str(), Some("${{ github.ref_name }}"));
    assert_eq!(steps[1]["env"]["PGO_CHECKOUT_PATH"].as_str(), Some("libs/alpha"));
    assert_eq!(steps[1]["env"]["PGO_CHECKOUT_TOKEN"].as_str(), Some("${{ github.token }}"));
    assert_eq!(steps[1]["run"].as_str(), Some(checkout::embedded(checkout::SCRIPT).as_str()));
    let task = finish_checkout(
        tpl(),
        render(tpl(), TASK_TEMPLATE, &task(Some("0 3 * * *"))).unwrap(),
        &CheckoutAction::default(),
        &script,
    )
    .unwrap();
    assert!(!task.contains("uses: actions/checkout"));
}
