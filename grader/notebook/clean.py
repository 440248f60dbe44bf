"""What of a student's notebook may reach a page that an instructor opens.

Feedback pages and formgrader render the graded notebook with nbconvert's templates,
formgrader on the Jupyter server's own origin, where a script would act with the
instructor's session. Those templates trust the notebook: an image's `width` metadata is
written unquoted into its <img> tag, a raw cell is copied into the page as it is, and
nbconvert's sanitiser only looks at HTML and markdown. So the notebook is cleaned before
grades are saved, and the notebook stored is safe for every renderer that comes later:

- outputs, as each cell ends (JudgedExecute: nbconvert validates the notebook right after
  it, and a malformed output would fail the notebook): only stream, display_data,
  execute_result and error; of a display, only text/plain and PNG or JPEG images that decode
  as such; of output metadata, only a numeric width and height per image; execution counts
  are numbers;
- metadata (CleanMetadata): a cell's reduced to nbgrader's (restored from the release for
  tracked cells), the notebook's to its kernel and language (no widget state, no title);
- cells the student wrote (FenceStudentMarkdown): markdown and raw shown as text,
  attachments dropped.
"""

import base64
import binascii
import re

from nbformat import from_dict
from nbgrader.preprocessors.base import NbGraderPreprocessor as Preprocessor

from autograder.cells import nbgrader_meta
from autograder.printable import shown_text

OUTPUT_TYPES = {"stream", "display_data", "execute_result", "error"}
IMAGE_SIGNATURES = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}
MAX_IMAGE_SIDE = 10_000  # pixels: a width or height beyond is not one a page needs
MAX_ERROR_CHARS = 4000  # of an error's name, message and each traceback line
LOCKS = ("deletable", "editable")  # JupyterLab's, kept when they are booleans
MAX_ENAME_CHARS = 200


class FenceStudentMarkdown(Preprocessor):
    """Show the markdown and raw cells a student wrote as text, never as HTML: an instructor's
    browser opening the feedback or formgrader must not run a student's <img onerror=...>, a
    javascript: link or a raw cell's <script>. The release's own (locked) cells render as usual."""

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            if cell.cell_type in ("markdown", "raw") and not nbgrader_meta(cell).get("locked"):
                longest = max((len(run) for run in re.findall(r"`+", cell.source)), default=0)
                fence = "`" * max(3, longest + 1)  # no run of backticks inside can close it
                cell.cell_type = "markdown"
                cell.source = f"{fence}text\n{cell.source}\n{fence}"
                cell.pop("attachments", None)
        return nb, resources


class CleanMetadata(Preprocessor):
    """Cells keep nbgrader's metadata alone; the notebook keeps its kernel and language (the
    kernel's own kernel_info reply fills language_info during the run, so it is not trusted)."""

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            kept = {k: v for k, v in cell.metadata.items() if k in LOCKS and type(v) is bool}
            if isinstance(cell.metadata.get("nbgrader"), dict):  # restored from the release for tracked cells
                kept["nbgrader"] = cell.metadata["nbgrader"]
            cell.metadata = kept
        nb.metadata = notebook_metadata(nb.metadata)
        return nb, resources


KERNELSPEC_KEYS = ("name", "display_name", "language")


def notebook_metadata(metadata) -> dict:
    """A notebook's metadata as it may be stored: its kernel and language, nothing else (no
    widget state, which a renderer would hand to a widget manager, no title)."""
    kernelspec = metadata.get("kernelspec")
    clean = {"language_info": {"name": "python"}}
    if isinstance(kernelspec, dict):
        clean["kernelspec"] = {k: str(v) for k, v in kernelspec.items() if k in KERNELSPEC_KEYS}
    return clean


def clean_cell(cell) -> list[str]:
    """Clean a code cell's outputs and execution count in place; returns the output types dropped."""
    kept, dropped = [], []
    for output in cell.get("outputs", []):
        clean = clean_output(output)
        if clean is None:
            dropped.append(str(output.get("output_type"))[:40])
        else:
            kept.append(clean)
    cell.outputs = kept
    if type(cell.get("execution_count")) is not int:
        cell.execution_count = None
    return dropped


def clean_output(output) -> dict | None:
    """The output as it may be stored, or None when nothing of it may be."""
    kind = output.get("output_type")
    if kind not in OUTPUT_TYPES:
        return None
    if kind == "stream":
        name = output.get("name") if output.get("name") in ("stdout", "stderr") else "stdout"
        return from_dict({"output_type": kind, "name": name, "text": _text(output.get("text"))})
    if kind == "error":
        return from_dict(
            {
                "output_type": kind,
                "ename": _text(output.get("ename"))[:MAX_ENAME_CHARS],
                "evalue": _text(output.get("evalue"))[:MAX_ERROR_CHARS],
                "traceback": [_text(line)[:MAX_ERROR_CHARS] for line in _lines(output.get("traceback"))],
            }
        )
    data, metadata = _display(output.get("data"), output.get("metadata"))
    clean = {"output_type": kind, "data": data, "metadata": metadata}
    if kind == "execute_result":
        count = output.get("execution_count")
        clean["execution_count"] = count if type(count) is int else None
    return from_dict(clean)


def _display(data, metadata) -> tuple[dict, dict]:
    """text/plain and valid images of a display, and their numeric sizes; other types are
    described in text/plain when the display has no text of its own."""
    data = data if isinstance(data, dict) else {}
    metadata = metadata if isinstance(metadata, dict) else {}
    clean, sizes = {}, {}
    for mime, signature in IMAGE_SIGNATURES.items():
        if _is_image(data.get(mime), signature):
            clean[mime] = data[mime]
            size = _size(metadata.get(mime))
            if size:
                sizes[mime] = size
    dropped = sorted(str(m)[:60] for m in data if m not in clean and m != "text/plain")
    if "text/plain" in data:
        clean["text/plain"] = _text(data["text/plain"])
    elif dropped and not clean:
        clean["text/plain"] = f"[an output of type {', '.join(dropped)}: not shown in grading]"
    return clean, sizes


def _is_image(value, signature: bytes) -> bool:
    if not isinstance(value, str):
        return False
    try:
        raw = base64.b64decode(re.sub(r"\s+", "", value), validate=True)
    except (binascii.Error, ValueError):
        return False
    return raw.startswith(signature)


def _size(meta) -> dict:
    if not isinstance(meta, dict):
        return {}
    return {
        key: meta[key]
        for key in ("width", "height")
        if type(meta.get(key)) is int and 0 < meta[key] <= MAX_IMAGE_SIDE
    }


def _text(value) -> str:
    """An output's text, inert: IPython's colours dropped, every other control character escaped
    (a terminal showing the page would act on it, a browser reorder its line)."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = "".join(value)
    elif not isinstance(value, str):
        value = "" if value is None else repr(value)[:MAX_ERROR_CHARS]
    return shown_text(COLOURS.sub("", value))


COLOURS = re.compile(r"\x1b\[[0-9;]*m")  # the SGR codes IPython colours a traceback with


def _lines(value) -> list:
    return value if isinstance(value, list) else []
