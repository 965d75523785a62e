"""Webcam bursts: a few frames of one person, taken from a live camera and fused into one probe.

A probe box's burst camera is a streaming gr.Image: once started it sends a JPEG frame every STREAM_EVERY
seconds, as a data: URL in the request body (Gradio writes none of them to its cache). The frames go
nowhere until the person presses "Take 3 frames": then the next BURST_FRAMES are kept, in memory, in this
tab's Frames (a gr.State no event writes over: every event mutates the one holder under its lock, so a
frame arriving while a message takes the burst cannot bring it back). The next message takes them out
(`chosen`) as a biomem.identity.bursts.Burst, which the engine fuses (frames with a poor capture
skipped, frames of different people refused); a burst not used within BURST_SECONDS is dropped.

The latest probe wins, whatever order Gradio runs the events in: taking a burst empties the probe box
(and remembers which image it emptied, so that image's own late change event cannot undo the burst); an
image put in the box afterwards drops the burst, and an image in the box when a message is sent is that
message's probe (`chosen`), since it can only be there if it came after the burst.
Each streamed chunk also writes None back to the camera, so Gradio's copy of the session's values never
keeps the last frame either. A stream runs until the person stops the camera (no time limit: Gradio would end
and restart it, and its button would flicker between Stop and Record); one whose page went away ends when no
frame came for 30 s (Gradio's wait for the next chunk), and a chunk that is no camera frame (a client posting
the event by hand) ends its stream at once.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from typing import Any

from ..identity.bursts import Burst
from . import uploads

BURST_FRAMES = 3  # frames a burst keeps: about a second of holding still
STREAM_EVERY = 0.3  # seconds between two frames of a started camera
BURST_SECONDS = 120  # a burst taken and not used within this is deleted
MAX_FRAME_BYTES = 4 * 1024 * 1024  # a webcam JPEG is tens of kB; a burst holds at most 3 of these in memory
NO_BURST = ("No burst. Start the camera (**Click to Access Webcam**, then **Record**: nothing is recorded), "
            f"hold still and press **Take {BURST_FRAMES} frames**; they are kept for your next message only.")


class Frames:
    """One probe box's burst in one browser tab: armed by "Take frames", filled by the camera's stream up
    to `size` frames (bytes, never a file), taken out by one message; thread-safe."""

    def __init__(self, size: int = BURST_FRAMES) -> None:
        self.size = size
        self._frames: list[bytes] = []
        self._taking = False  # armed: the stream's next frames are kept
        self._since = 0.0  # when it was armed
        self._used = 0  # frames the last message took (its count, never the frames)
        self._emptied: str | None = None  # the image that taking this burst emptied from the probe box
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        """Frames held now (a property, not __len__: an empty holder must stay truthy to Gradio)."""
        with self._lock:
            return len(self._frames)

    def __deepcopy__(self, memo: dict[int, Any]) -> Frames:
        return Frames(self.size)  # each session's gr.State gets a holder of its own, empty

    def arm(self, emptied: str | None = None) -> None:
        """Keep the next `size` frames (dropping any held); `emptied` the path of the image this takes the
        place of in the probe box."""
        with self._lock:
            self._frames, self._taking, self._since, self._used = [], True, time.monotonic(), 0
            self._emptied = emptied

    def replaced_by(self, image: str | None) -> bool:
        """An image arrived in the probe box: drop the burst (True) unless there is none, or it is the image
        taking the burst emptied (its change event, run late)."""
        if not image or image == self._emptied:
            return False
        self.clear()
        return True

    def add(self, frame: bytes | None) -> int | None:
        """Keep `frame` if a burst is being taken: the number of frames held then, else None (dropped)."""
        with self._lock:
            if frame is None or not self._taking or self._expired():
                return None
            self._frames.append(frame)
            self._taking = len(self._frames) < self.size
            return len(self._frames)

    def take(self) -> list[bytes]:
        """The frames held (none once expired), taken out: the holder is empty afterwards."""
        with self._lock:
            frames = [] if self._expired() else self._frames
            self._frames, self._taking, self._used = [], False, len(frames)
            return frames

    def clear(self) -> None:
        """Drop whatever is held or being taken."""
        with self._lock:
            self._frames, self._taking, self._used = [], False, 0

    def _expired(self) -> bool:
        return time.monotonic() - self._since > BURST_SECONDS

    def status(self) -> str:
        """What the page says about this burst: how many frames it holds, or what the last message took."""
        with self._lock:
            held, taking, used = len(self._frames), self._taking, self._used
        if taking and not held:
            return (f"Hold still: taking **{self.size} frames**… (the camera above must be on: **Click to Access "
                    "Webcam**, then **Record**)")
        if taking:
            return f"Hold still… **{held} of {self.size} frames** taken."
        if held:
            return (f"**Burst: {held} frame{'s' if held != 1 else ''}**, fused into one probe for your next message, "
                    "then deleted.")
        if used:
            return (f"The last message used a burst of **{used} frame{'s' if used != 1 else ''}**; they are "
                    f"deleted. Press **Take {self.size} frames** for the next one.")
        return NO_BURST


def forget(frames: Frames | None) -> None:
    """The tab closed, or its burst outlived BURST_SECONDS: drop its frames (gr.State's delete_callback)."""
    if isinstance(frames, Frames):
        frames.clear()


def frame_bytes(value: Any) -> bytes | None:
    """The image bytes of one streamed frame (a {"url": "data:image/…;base64,…"} payload, or that URL), or
    None for anything else: a streamed frame is never a path, so nothing on the server is ever read."""
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str) or not url.startswith("data:image/"):
        return None
    head, _, data = url.partition(",")
    if not head.endswith(";base64") or len(data) > MAX_FRAME_BYTES * 4 // 3 + 4:
        return None
    try:
        return base64.b64decode(data, validate=True) or None
    except (binascii.Error, ValueError):
        return None


def chosen(probe: Any, frames: Frames | None) -> Any:
    """A message's probe: the image in the box if there is one (put there after any burst, which is dropped),
    else the burst this box took (a Burst of its frames, taken out of the holder), else None."""
    if not isinstance(frames, Frames):
        return probe
    if uploads.upload_path(probe):
        frames.clear()
        return probe
    taken = frames.take()
    return Burst(taken) if taken else probe
