"""The record: results kept in OUT, the merged gradebook, grades.csv, feedback pages and the class report."""
