"""The request body of each queue: a pydantic model, checked before anything is written.

An unknown field, a missing one or a value of the wrong type is a 400 with no job created
and no message sent.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class DocumentJob(Body):
    """OCR and indexing: the document to work on."""

    document_id: str = Field(min_length=1, max_length=64)


class SummaryJob(DocumentJob):
    instructions: str = Field(default="summarize", min_length=1, max_length=500)


class EmailJob(Body):
    to: str = Field(min_length=3, max_length=255, pattern=r"^[^@\s]+@[^@\s]+$")
    subject: str = Field(min_length=1, max_length=200)
    body: str = Field(min_length=1, max_length=10_000)


class NotificationJob(Body):
    message: str = Field(min_length=1, max_length=1_000)


class CourseJob(Body):
    course_id: str = Field(min_length=1, max_length=64)
    modules: int = Field(ge=1, le=20)


class NewDocument(Body):
    """``POST /documents``: a document for the OCR, AI and indexing jobs to work on."""

    document_id: str = Field(min_length=1, max_length=64)
    body: str = Field(min_length=1, max_length=100_000)


#: The API's queues and their bodies (the processors have the same names).
BODIES: dict[str, type[Body]] = {
    "ocr": DocumentJob,
    "ai": SummaryJob,
    "indexing": DocumentJob,
    "email": EmailJob,
    "notification": NotificationJob,
    "course": CourseJob,
}
