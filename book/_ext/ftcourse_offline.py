"""A Sphinx extension of the course site: no page carries code that would reach another machine."""


def setup(app):
    # Jupyter Book always loads sphinx-thebe, which (even with thebe off) adds to every page an
    # inline script naming thebe's CDN copy, twice: browsers report "THEBE_JS_URL has already
    # been declared". The course never runs code on its site, so thebe's hooks are taken out.
    for event in ("env-before-read-docs", "doctree-resolved"):
        for listener in list(app.events.listeners.get(event, [])):
            if getattr(listener.handler, "__module__", "").startswith("sphinx_thebe"):
                app.disconnect(listener.id)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
