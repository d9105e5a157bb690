"""All of chatgql's SQL. Functions take a connection first and never commit."""
