"""The errors an encoder raises, owned here so that `modalities` needs nothing from `biomem`;
`biomem.errors` re-exports them beside the engine's own."""


class BioMemError(Exception):
    """Base class of every error Bio-Memory raises on purpose."""


class InvalidInputError(BioMemError, ValueError):
    """Input that cannot be used at all: empty text, wrong type, unknown option."""


class InvalidImageError(InvalidInputError):
    """A file or array that is not an image; its subclasses name the other reasons an image is refused."""


class ImageTooLargeError(InvalidImageError):
    """An image with more pixels than the decoder takes (modalities.images.MAX_PIXELS)."""


class ImageBombError(ImageTooLargeError):
    """A file whose header claims far more pixels than its bytes can hold: refused before any pixel is decoded."""


class ImageTooSmallError(InvalidImageError):
    """An image with a side too short to hold a usable face or palm."""


class UnsupportedImageFormatError(InvalidImageError):
    """An image in a format the decoder does not read (HEIC, JPEG XL, SVG): convert it to JPEG or PNG."""


class CorruptImageError(InvalidImageError):
    """A file that opens as an image but cannot be decoded: cut short or damaged."""


class NoFaceError(InvalidInputError):
    """The probe image holds no detectable face."""


class NoPalmError(InvalidInputError):
    """The image holds no usable palm region (blank, flat, or not a palm ROI)."""


class MultipleFacesError(InvalidInputError):
    """The probe image holds several faces: the requester is ambiguous, so we refuse."""


class PoorCaptureError(InvalidInputError):
    """A face too small, turned away, blurred or faintly detected to match or enrol; `hint` says what to change
    ("move closer", "face the camera", "hold still", "more light"), `criterion` which measure fell short."""

    def __init__(self, message: str, hint: str, *, criterion: str = "", quality: object = None) -> None:
        super().__init__(message)
        self.hint = hint
        self.criterion = criterion
        self.quality = quality  # the measures (modalities.quality.FaceQuality) when the encoder made them


class ModelUnavailableError(BioMemError, RuntimeError):
    """A model or weight file cannot be found locally and cannot be downloaded."""


class UnknownModalityError(InvalidInputError, LookupError):
    """No encoder of that name is registered (built-in, entry point or register())."""


class UnknownEncoderError(UnknownModalityError, KeyError):
    """The registry knows no encoder of that name; still a KeyError for code written against dict lookups."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PluginError(BioMemError, TypeError):
    """Something registered as an encoder (register() or an entry point) is not an Encoder subclass."""


def describe(exc: BaseException) -> str:
    """One line for people naming an exception: `ExceptionClass: first line of its message`."""
    lines = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {lines[0]}" if lines else exc.__class__.__name__


class WrongModalityError(InvalidInputError):
    """A capture of another modality than the encoder's: an image given to a voice encoder, say."""


class InvalidAudioError(InvalidInputError):
    """A file, bytes or array that is not a usable recording; its subclasses name the other reasons audio is refused."""


class UnsupportedAudioFormatError(InvalidAudioError):
    """A recording in a format the decoder does not read (M4A, WebM, AIFF ...): convert it to WAV, FLAC, OGG or MP3."""


class AudioTooLongError(InvalidAudioError):
    """A recording longer, or a file larger, than the decoder takes (modalities.audio.MAX_SECONDS, MAX_FILE_BYTES)."""


class TooLittleSpeechError(PoorCaptureError):
    """A recording with too little speech once the silences are cut (or none): the person must speak longer.
    A PoorCaptureError, so callers that show a capture's hint show "speak longer"."""
