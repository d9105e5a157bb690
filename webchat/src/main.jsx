import "./styles.css";
import { createRoot } from "react-dom/client";
import { App } from "./App.jsx";

// Set by the page chatgql serves: where the API is, and the sign-in (development only).
const config = JSON.parse(document.getElementById("chatgql-config").textContent);
createRoot(document.getElementById("root")).render(<App config={config} />);
