# chatgql API image (used by docker-compose.yml). Installed from the checkout
# so that alembic/ (the migrations) sits next to the package.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY alembic ./alembic
COPY src ./src
RUN pip install --no-cache-dir -e .
ENV CHATGQL_HOST=0.0.0.0
EXPOSE 8000
CMD ["chatgql", "serve"]
