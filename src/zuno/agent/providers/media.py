"""Which images of a conversation one request sends, and the words for the rest.

Both providers ask the same questions of a tool result's images (see
:mod:`zuno.contract.images`): does the model see images at all, is this one among the
newest a request may carry, is its artifact still there. An image that passes
is sent as base64 in the provider's own shape; any other is a sentence the
model reads in its place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zuno.agent.messages import Message, ToolResultMessage
from zuno.contract.images import CANNOT_SEE, GONE, TOO_MANY, newest_images, unseen_image_text

__all__ = ["ImagePlan", "SentImage"]


@dataclass(frozen=True, slots=True)
class SentImage:
    """An image going out: its MIME type, base64 bytes and what it is of."""

    media_type: str
    data: str
    source: str


@dataclass(frozen=True, slots=True)
class ImagePlan:
    """What one request does with the images of its conversation.

    Args:
        accepts: Whether the model sees images (``providers.NAME.images``).
        chosen: The artifact paths of the images this request carries.
    """

    accepts: bool
    chosen: frozenset[str]

    @classmethod
    def of(cls, messages: Sequence[Message], accepts: bool) -> ImagePlan:
        """The plan for ``messages``: the newest images, when the model sees any."""
        if not accepts:
            return cls(False, frozenset())
        found = (
            image
            for message in messages
            if isinstance(message, ToolResultMessage)
            for image in message.images
        )
        return cls(True, newest_images(found))

    def split(self, message: ToolResultMessage) -> tuple[list[SentImage], list[str]]:
        """The images of ``message`` to send, and a sentence for each one not sent."""
        sent: list[SentImage] = []
        words: list[str] = []
        for image in message.images:
            if not self.accepts:
                words.append(unseen_image_text(image, CANNOT_SEE))
                continue
            if image.path not in self.chosen:
                words.append(unseen_image_text(image, TOO_MANY))
                continue
            data = image.base64_data()
            if data is None:
                words.append(unseen_image_text(image, GONE))
                continue
            sent.append(SentImage(image.media_type, data, image.source))
        return sent, words
