#!/usr/bin/env python3
"""Renders a crate's public API from its rustdoc JSON as a sorted text listing.

Usage: public_api.py <crate.json> [header-line ...] > listing.txt

The input is what `cargo rustdoc -- -Z unstable-options --output-format json`
writes (format version FORMAT_VERSION). The walk starts at the crate root and
follows public modules and `pub use` re-exports, so an item is listed under the
paths a user can name, not where it is defined. Each item is a block: its own
line, then its fields or variants, its inherent methods, and its trait impls
(with the impls' associated types and constants). Blocks are sorted by path and
the lines inside a block by kind and text, so the output depends on the API only.

What is left out, on purpose: blanket impls (`impl<T> From<T> for T` and the
like, which follow from the traits' own impls), the methods of trait impls
(their signatures are the trait's), private fields, constant values, and items
rustdoc hides (`#[doc(hidden)]`). Auto-trait impls (`Send`, `Sync`, `Unpin`,
`UnwindSafe`, `RefUnwindSafe`) are listed: a type that stops being `Send` is a
breaking change.
"""

import json
import sys

FORMAT_VERSION = 57

AUTO_TRAITS = {
    "core::marker::Send",
    "core::marker::Sync",
    "core::marker::Unpin",
    "core::panic::unwind_safe::UnwindSafe",
    "core::panic::unwind_safe::RefUnwindSafe",
}


class Api:
    def __init__(self, doc):
        if doc["format_version"] != FORMAT_VERSION:
            sys.exit(
                f"public_api.py reads rustdoc JSON format {FORMAT_VERSION}, "
                f"the toolchain wrote {doc['format_version']}: update the renderer"
            )
        self.index = doc["index"]
        self.paths = doc["paths"]
        self.crates = doc["external_crates"]
        self.root = doc["root"]
        # id -> every public path of the item, as lists of segments.
        self.public = {}
        # (path, use-target description) of re-exports of other crates' items.
        self.foreign_uses = []

    # ---- the walk -------------------------------------------------------

    def item(self, id_):
        return self.index.get(str(id_))

    def walk(self, id_, path, seen):
        """Records every public path reachable from module `id_` at `path`."""
        if id_ in seen:
            return
        seen = seen | {id_}
        module = self.item(id_)["inner"]["module"]
        for child_id in module["items"]:
            child = self.item(child_id)
            if child is None or child["visibility"] != "public":
                continue
            kind, inner = kind_of(child)
            if kind == "use":
                self.walk_use(inner, path, seen)
            elif kind == "impl":
                continue
            else:
                self.record(child_id, path + [child["name"]], seen)

    def walk_use(self, use, path, seen):
        target = self.item(use["id"]) if use["id"] is not None else None
        if use["is_glob"]:
            if target is not None and kind_of(target)[0] == "module":
                self.walk(use["id"], path, seen)
            else:
                self.foreign_uses.append((path + ["*"], use["source"]))
            return
        if target is None:
            self.foreign_uses.append((path + [use["name"]], self.foreign_path(use)))
            return
        self.record(use["id"], path + [use["name"]], seen)

    def foreign_path(self, use):
        summary = self.paths.get(str(use["id"])) if use["id"] is not None else None
        if summary is not None:
            return "::".join(summary["path"])
        return use["source"]

    def record(self, id_, path, seen):
        paths = self.public.setdefault(id_, [])
        if path in paths:
            return  # named twice at one path, e.g. by a glob and by name
        paths.append(path)
        if kind_of(self.item(id_))[0] == "module":
            self.walk(id_, path, seen)

    def canonical(self, id_):
        """The shortest public path of an item, preferring its own name over
        a `use .. as` alias, ties broken by text."""
        paths = self.public.get(id_)
        if not paths:
            return None
        name = self.item(id_)["name"]
        return min(paths, key=lambda p: (len(p), p[-1] != name, "::".join(p)))

    # ---- paths and types ------------------------------------------------

    def path_of(self, id_, written):
        if id_ is not None:
            canon = self.canonical(id_)
            if canon is not None:
                return "::".join(canon)
            summary = self.paths.get(str(id_))
            if summary is not None:
                return "::".join(summary["path"])
        return written

    def rpath(self, p):
        return self.path_of(p["id"], p["path"]) + self.generic_args(p.get("args"))

    def generic_args(self, args):
        if not args:
            return ""
        if "angle_bracketed" in args:
            ab = args["angle_bracketed"]
            parts = [self.generic_arg(a) for a in ab["args"]]
            parts += [self.constraint(c) for c in ab["constraints"]]
            return f"<{', '.join(parts)}>" if parts else ""
        if "parenthesized" in args:
            par = args["parenthesized"]
            inputs = ", ".join(self.ty(t) for t in par["inputs"])
            out = f" -> {self.ty(par['output'])}" if par["output"] is not None else ""
            return f"({inputs}){out}"
        return "(..)"  # return type notation

    def generic_arg(self, a):
        if a == "infer":
            return "_"
        if "lifetime" in a:
            return a["lifetime"]
        if "type" in a:
            return self.ty(a["type"])
        if "const" in a:
            return self.constant(a["const"])
        return fallback(a)

    def constant(self, c):
        return c.get("expr") or c.get("value") or "_"

    def constraint(self, c):
        name = c["name"] + self.generic_args(c.get("args"))
        binding = c["binding"]
        if "equality" in binding:
            term = binding["equality"]
            value = self.ty(term["type"]) if "type" in term else self.constant(term["constant"])
            return f"{name} = {value}"
        return f"{name}: {self.bounds(binding['constraint'])}"

    def ty(self, t):
        if t is None:
            return "()"
        if isinstance(t, str):
            return "_" if t == "infer" else t
        (kind, v), = t.items()
        if kind == "resolved_path":
            return self.rpath(v)
        if kind == "generic" or kind == "primitive":
            return v
        if kind == "borrowed_ref":
            lifetime = f"{v['lifetime']} " if v["lifetime"] else ""
            mutable = "mut " if v["is_mutable"] else ""
            return f"&{lifetime}{mutable}{self.ty(v['type'])}"
        if kind == "raw_pointer":
            return f"*{'mut' if v['is_mutable'] else 'const'} {self.ty(v['type'])}"
        if kind == "tuple":
            inner = ", ".join(self.ty(x) for x in v)
            return f"({inner},)" if len(v) == 1 else f"({inner})"
        if kind == "slice":
            return f"[{self.ty(v)}]"
        if kind == "array":
            return f"[{self.ty(v['type'])}; {v['len']}]"
        if kind == "impl_trait":
            return f"impl {self.bounds(v)}"
        if kind == "dyn_trait":
            parts = [self.poly_trait(p) for p in v["traits"]]
            if v.get("lifetime"):
                parts.append(v["lifetime"])
            return f"dyn {' + '.join(parts)}"
        if kind == "function_pointer":
            return self.fn_pointer(v)
        if kind == "qualified_path":
            self_ty = self.ty(v["self_type"])
            name = v["name"] + self.generic_args(v.get("args"))
            if v["trait"] is None:
                return f"{self_ty}::{name}"
            return f"<{self_ty} as {self.rpath(v['trait'])}>::{name}"
        if kind == "pat":
            return f"{self.ty(v['type'])} is {v['__pat_unstable_do_not_use']}"
        return fallback(t)

    def poly_trait(self, p):
        hrtb = self.hrtb(p.get("generic_params", []))
        return f"{hrtb}{self.rpath(p['trait'])}"

    def hrtb(self, params):
        if not params:
            return ""
        return f"for<{', '.join(self.generic_param(p) for p in params)}> "

    def fn_pointer(self, v):
        header = self.header(v["header"])
        inputs = ", ".join(self.ty(t) for _, t in v["sig"]["inputs"])
        if v["sig"]["is_c_variadic"]:
            inputs += ", ..."
        out = self.output(v["sig"]["output"])
        return f"{self.hrtb(v.get('generic_params', []))}{header}fn({inputs}){out}"

    def bounds(self, bounds):
        return " + ".join(self.bound(b) for b in bounds)

    def bound(self, b):
        if "trait_bound" in b:
            tb = b["trait_bound"]
            modifier = {"none": "", "maybe": "?", "maybe_const": "[const] "}.get(tb["modifier"], "")
            return f"{self.hrtb(tb.get('generic_params', []))}{modifier}{self.rpath(tb['trait'])}"
        if "outlives" in b:
            return b["outlives"]
        if "use" in b:
            names = []
            for arg in b["use"]:
                names.append(arg if isinstance(arg, str) else next(iter(arg.values())))
            return f"use<{', '.join(names)}>"
        return fallback(b)

    # ---- generics and signatures ----------------------------------------

    def generic_param(self, p):
        (kind, v), = p["kind"].items()
        if kind == "lifetime":
            out = f": {' + '.join(v['outlives'])}" if v["outlives"] else ""
            return f"{p['name']}{out}"
        if kind == "type":
            out = f": {self.bounds(v['bounds'])}" if v["bounds"] else ""
            default = f" = {self.ty(v['default'])}" if v["default"] is not None else ""
            return f"{p['name']}{out}{default}"
        if kind == "const":
            default = f" = {v['default']}" if v["default"] is not None else ""
            return f"const {p['name']}: {self.ty(v['type'])}{default}"
        return fallback(p)

    def params(self, generics):
        # `impl Trait` arguments appear as synthetic parameters: the argument
        # already shows them.
        shown = [
            p
            for p in generics["params"]
            if not p["kind"].get("type", {}).get("is_synthetic", False)
        ]
        if not shown:
            return ""
        return f"<{', '.join(self.generic_param(p) for p in shown)}>"

    def where_clause(self, generics, extra=()):
        preds = list(extra) + [self.predicate(w) for w in generics["where_predicates"]]
        return f" where {', '.join(preds)}" if preds else ""

    def predicate(self, w):
        (kind, v), = w.items()
        if kind == "bound_predicate":
            hrtb = self.hrtb(v.get("generic_params", []))
            return f"{hrtb}{self.ty(v['type'])}: {self.bounds(v['bounds'])}"
        if kind == "lifetime_predicate":
            return f"{v['lifetime']}: {' + '.join(v['outlives'])}"
        if kind == "eq_predicate":
            rhs = v["rhs"]
            value = self.ty(rhs["type"]) if "type" in rhs else self.constant(rhs["constant"])
            return f"{self.ty(v['lhs'])} = {value}"
        return fallback(w)

    def header(self, h):
        out = ""
        if h["is_const"]:
            out += "const "
        if h["is_async"]:
            out += "async "
        if h["is_unsafe"]:
            out += "unsafe "
        abi = h["abi"]
        if abi != "Rust":
            name = abi if isinstance(abi, str) else next(iter(abi))
            out += f'extern "{name}" '
        return out

    def output(self, out):
        return f" -> {self.ty(out)}" if out is not None else ""

    def argument(self, name, t):
        if name == "self":
            if t == {"generic": "Self"}:
                return "self"
            ref = t.get("borrowed_ref") if isinstance(t, dict) else None
            if ref is not None and ref["type"] == {"generic": "Self"}:
                lifetime = f"{ref['lifetime']} " if ref["lifetime"] else ""
                return f"&{lifetime}{'mut ' if ref['is_mutable'] else ''}self"
        return f"{name}: {self.ty(t)}"

    def function(self, path, f, impl_generics=None):
        sig = f["sig"]
        args = ", ".join(self.argument(n, t) for n, t in sig["inputs"])
        if sig["is_c_variadic"]:
            args += ", ..."
        extra = []
        if impl_generics is not None:
            extra = [self.predicate(w) for w in impl_generics["where_predicates"]]
            extra += [
                f"{p['name']}: {self.bounds(p['kind']['type']['bounds'])}"
                for p in impl_generics["params"]
                if "type" in p["kind"] and p["kind"]["type"]["bounds"]
            ]
        return (
            f"pub {self.header(f['header'])}fn {path}{self.params(f['generics'])}"
            f"({args}){self.output(sig['output'])}"
            f"{self.where_clause(f['generics'], extra)}"
        )

    # ---- items ----------------------------------------------------------

    def block(self, id_, path):
        """The lines of one item reached at `path`: (item line, member lines)."""
        item = self.item(id_)
        kind, inner = kind_of(item)
        name = "::".join(path)
        attrs = markers(item)
        canon = self.canonical(id_)
        if canon != path:
            # The same item, reachable under a second path: its members are
            # listed once, under the canonical one.
            return f"pub use {name} = {'::'.join(canon)}", []
        members = []
        if kind == "module":
            head = f"pub mod {name}"
        elif kind == "struct":
            head, members = self.struct(name, inner)
        elif kind == "union":
            head = f"pub union {name}{self.params(inner['generics'])}"
            members = self.fields(name, inner["fields"])
        elif kind == "enum":
            head, members = self.enum(name, inner)
        elif kind == "function":
            head = self.function(name, inner)
        elif kind == "constant":
            head = f"pub const {name}: {self.ty(inner['type'])}"
        elif kind == "static":
            mutable = "mut " if inner["is_mutable"] else ""
            unsafe = "unsafe " if inner.get("is_unsafe") else ""
            head = f"pub {unsafe}static {mutable}{name}: {self.ty(inner['type'])}"
        elif kind == "type_alias":
            g = inner["generics"]
            head = f"pub type {name}{self.params(g)}{self.where_clause(g)} = {self.ty(inner['type'])}"
        elif kind == "trait":
            head, members = self.trait(name, inner)
        elif kind == "trait_alias":
            head = f"pub trait {name}{self.params(inner['generics'])} = {self.bounds(inner['params'])}"
        elif kind == "macro":
            head = f"pub macro {path[-1]}! (exported at {name})"
        elif kind == "proc_macro":
            head = f"pub proc_macro {name}"
        else:
            head = f"pub {kind} {name} {fallback(inner)}"
        if "impls" in inner:
            members += self.impls(name, inner["impls"])
        return attrs + head, members

    def struct(self, name, s):
        g = s["generics"]
        head = f"pub struct {name}{self.params(g)}{self.where_clause(g)}"
        k = s["kind"]
        members = []
        if k == "unit":
            head += ";"
        elif "tuple" in k:
            shown = [self.field_type(f) for f in k["tuple"]]
            head += f"({', '.join(shown)})"
            members = self.fields(name, [f for f in k["tuple"] if f is not None])
        else:
            plain = k["plain"]
            if plain["has_stripped_fields"]:
                head += " { /* private fields */ }"
            members = self.fields(name, plain["fields"])
        return head, members

    def field_type(self, id_):
        if id_ is None:
            return "_"
        return f"pub {self.ty(self.item(id_)['inner']['struct_field'])}"

    def fields(self, owner, ids):
        out = []
        for id_ in ids:
            f = self.item(id_)
            out.append(f"pub {owner}::{f['name']}: {self.ty(f['inner']['struct_field'])}")
        return out

    def enum(self, name, e):
        g = e["generics"]
        head = f"pub enum {name}{self.params(g)}{self.where_clause(g)}"
        if e["has_stripped_variants"]:
            head += " { /* hidden variants */ }"
        members = []
        for id_ in e["variants"]:
            v = self.item(id_)
            inner = v["inner"]["variant"]
            vname = f"{name}::{v['name']}"
            k = inner["kind"]
            if k == "plain":
                line = vname
            elif "tuple" in k:
                line = f"{vname}({', '.join(self.field_type(f)[4:] if f is not None else '_' for f in k['tuple'])})"
            else:
                st = k["struct"]
                names = [self.item(f)["name"] for f in st["fields"]]
                if st["has_stripped_fields"]:
                    names.append("..")
                line = f"{vname} {{ {', '.join(names)} }}"
                members += self.fields(vname, st["fields"])
            if inner["discriminant"] is not None:
                line += f" = {inner['discriminant']['expr']}"
            members.append(markers(v) + f"pub {line}")
        return head, members

    def trait(self, name, t):
        g = t["generics"]
        qualifiers = ("unsafe " if t["is_unsafe"] else "") + ("auto " if t["is_auto"] else "")
        supertraits = f": {self.bounds(t['bounds'])}" if t["bounds"] else ""
        dyn = "" if t["is_dyn_compatible"] else " (not dyn-compatible)"
        head = f"pub {qualifiers}trait {name}{self.params(g)}{supertraits}{self.where_clause(g)}{dyn}"
        members = [self.assoc(name, self.item(i), None) for i in t["items"]]
        members = [m for m in members if m]
        # Impls for this crate's public types are listed under those types;
        # the rest (for foreign types, blanket impls) under the trait.
        for id_ in t["implementations"]:
            impl = self.item(id_)["inner"]["impl"]
            target = impl["for"].get("resolved_path") if isinstance(impl["for"], dict) else None
            if target is None or self.canonical(target["id"]) is None:
                g = impl["generics"]
                members.append(
                    f"impl{self.params(g)} {self.rpath(impl['trait'])} "
                    f"for {self.ty(impl['for'])}{self.where_clause(g)}"
                )
        return head, members

    def assoc(self, owner, item, impl_generics):
        kind, inner = kind_of(item)
        path = f"{owner}::{item['name']}"
        if kind == "function":
            return self.function(path, inner, impl_generics)
        if kind == "assoc_const":
            return f"pub const {path}: {self.ty(inner['type'])}"
        if kind == "assoc_type":
            g = inner["generics"]
            bounds = f": {self.bounds(inner['bounds'])}" if inner["bounds"] else ""
            value = f" = {self.ty(inner['type'])}" if inner.get("type") is not None else ""
            return f"pub type {path}{self.params(g)}{bounds}{self.where_clause(g)}{value}"
        return None

    def impls(self, name, ids):
        out = []
        for id_ in ids:
            impl = self.item(id_)["inner"]["impl"]
            if impl["blanket_impl"] is not None or self.unlisted(impl):
                continue
            g = impl["generics"]
            if impl["trait"] is None:
                # Inherent methods: the path names the type with the impl's
                # parameters, so methods of `impl<T> X<T>` read `X<T>::f`.
                owner = name + self.type_args(impl["for"])
                for item_id in impl["items"]:
                    item = self.item(item_id)
                    if item["visibility"] == "public":
                        line = self.assoc(owner, item, g)
                        if line:
                            out.append(markers(item) + line)
                continue
            negative = "!" if impl["is_negative"] else ""
            unsafe = "unsafe " if impl["is_unsafe"] else ""
            head = (
                f"{unsafe}impl{self.params(g)} {negative}{self.rpath(impl['trait'])} "
                f"for {self.ty(impl['for'])}{self.where_clause(g)}"
            )
            out.append(head)
            # Associated types and constants of a trait impl say what the impl
            # means (`Future::Output`, `Deref::Target`); its methods' signatures
            # are the trait's.
            for item_id in impl["items"]:
                item = self.item(item_id)
                kind, inner = kind_of(item)
                if kind == "assoc_type":
                    params = self.params(inner["generics"])
                    out.append(f"    type {item['name']}{params} = {self.ty(inner['type'])}")
                elif kind == "assoc_const":
                    out.append(f"    const {item['name']}: {self.ty(inner['type'])}")
        return out

    def unlisted(self, impl):
        """Compiler-internal marker traits: `StructuralPartialEq` comes with
        every derived `PartialEq`, and of the auto traits only the stable ones
        say something to a user (`Freeze` and `UnsafeUnpin` are unstable)."""
        path = self.path_of(impl["trait"]["id"], impl["trait"]["path"]) if impl["trait"] else ""
        if path == "core::marker::StructuralPartialEq":
            return True
        return impl["is_synthetic"] and path not in AUTO_TRAITS

    def type_args(self, t):
        if isinstance(t, dict) and "resolved_path" in t:
            return self.generic_args(t["resolved_path"].get("args"))
        return ""

    # ---- the listing ----------------------------------------------------

    def listing(self):
        self.walk(self.root, [self.item(self.root)["name"]], frozenset())
        blocks = []
        for id_, paths in self.public.items():
            for path in paths:
                head, members = self.block(id_, path)
                blocks.append((path, head, members))
        for path, source in self.foreign_uses:
            blocks.append((path, f"pub use {'::'.join(path)} = {source}", []))
        blocks.sort(key=lambda b: ([s.lower() for s in b[0]], b[0], b[1]))
        lines = []
        for _, head, members in blocks:
            lines.append(head)
            lines += sort_members(members)
        return lines


def sort_members(members):
    """Fields and variants first, then methods, then trait impls with their
    associated items kept under them; each group sorted by text."""
    groups, current = [], None
    for line in members:
        if line.startswith("    ") and current is not None:
            current.append(line)
        else:
            current = [line]
            groups.append(current)
    for g in groups:
        g[1:] = sorted(g[1:])

    def rank(g):
        first = g[0]
        if "impl" in first.split(" ", 2)[:2] or first.startswith("impl"):
            return 2
        if " fn " in first:
            return 1
        return 0

    groups.sort(key=lambda g: (rank(g), g[0]))
    return [line for g in groups for line in g]


def kind_of(item):
    (kind, inner), = item["inner"].items()
    return kind, inner


def markers(item):
    out = ""
    for a in item["attrs"]:
        if a == "non_exhaustive":
            out += "#[non_exhaustive] "
        elif isinstance(a, dict) and "must_use" in a:
            out += "#[must_use] "
    if item.get("deprecation"):
        out += "#[deprecated] "
    return out


def fallback(v):
    # Shapes the renderer does not know yet still show, deterministically.
    return "/*" + json.dumps(v, sort_keys=True, separators=(",", ":")) + "*/"


def main():
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    api = Api(doc)
    out = sys.stdout
    for line in sys.argv[2:]:
        out.write(f"// {line}\n" if line else "//\n")
    if len(sys.argv) > 2:
        out.write("\n")
    for line in api.listing():
        out.write(line + "\n")


if __name__ == "__main__":
    main()
