# chatgql image (docker-compose.yml, docker-compose.scaled.yml). Installed from the checkout
# so that alembic/ (the migrations) sits next to the package; with redis-py (the redis extra)
# for a redis:// or redis+cluster:// bus.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY alembic ./alembic
COPY src ./src
RUN pip install --no-cache-dir -e ".[redis,otel]"
ENV CHATGQL_HOST=0.0.0.0
EXPOSE 8000
CMD ["chatgql", "serve"]
