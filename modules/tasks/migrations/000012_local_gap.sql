-- local only: stands for the file another branch adds as 000012.
SELECT 1;
