"""persisted_document: the GraphQL documents clients may send by id

Revision ID: 0023_persisted_documents
Revises: 0022_reports
Create Date: 2026-12-07

`chatgql documents load MANIFEST` writes a client's documents here (id -> text); every worker
reads them, so every process of a deployment knows the same set (docs/guide/clients.md). A text
sent without an id is found by its sha256 (body_sha256, of its UTF-8): the allowlist lets a listed
text through.
A new, empty table.
"""

from alembic import op

revision = "0023_persisted_documents"
down_revision = "0022_reports"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE TABLE persisted_document ("
        ' id text COLLATE "C" PRIMARY KEY,'
        " body text NOT NULL,"
        " name text,"
        ' body_sha256 text COLLATE "C" NOT NULL,'
        " loaded_at timestamptz NOT NULL DEFAULT now(),"
        " CONSTRAINT persisted_document_id_check CHECK (length(id) BETWEEN 1 AND 200))"
    )
    op.execute("CREATE INDEX persisted_document_body_sha256_idx ON persisted_document (body_sha256)")


def downgrade() -> None:
    op.execute("DROP TABLE persisted_document")
