//! The workbench web app (placeholder while the page is written).
